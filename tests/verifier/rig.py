"""A real sco-verifier process between fake peers on real ipc:// sockets, for end-to-end tests.

``Peers`` binds the sockets the verifier connects to (the watcher's and the
executor's PUB, the spool's ROUTER) and subscribes to the verifier's PUB. One
background thread owns every zmq socket: it publishes the current notice,
contract and progress state every 0.2 s (level-triggered, as the real
processes do), acknowledges spool events (unless ``spool_up`` is False: then
events are dropped unread, like a spool that is down), and records what the
verifier publishes. Tests change the state through plain attributes.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any

import zmq

from common import ipc
from common.timefmt import format_rfc3339
from tests.agent_rig import REPO, write_config
from tests.procutil import wait_for


def notice_dict(nid: str, deadline: float, issued: float | None = None, node: str = "node-a",
                channel: str = "relay") -> dict[str, Any]:
    issued = time.time() if issued is None else issued
    return {"id": nid, "kind": "reclaim", "node": node, "instance_id": "i-1", "issued_at": format_rfc3339(issued),
            "deadline": format_rfc3339(deadline), "source": "test", "channel": channel,
            "received_at": issued + 0.05, "detail": ""}


class Peers:
    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        ipc.ensure_runtime_dir(run_dir)
        self.lock = threading.Lock()
        self.active: list[dict[str, Any]] = []
        self.withdrawn: list[str] = []
        self.counters: dict[str, int] = {}
        # A valid contract payload (None: the watcher has announced none).
        self.contract: dict[str, Any] | None = {
            "serial": 1, "hall": "h1", "issued_at": "2026-11-29T12:00:00Z",
            "drain": {"budget_s": 30, "checkpoint_s": 1, "evict_s": 1, "margin_s": 2}}
        self.progress: dict[str, Any] = {}
        self.spool_up = True
        self.events: dict[str, dict[str, Any]] = {}   # event_id -> event (resends collapse)
        self.received = 0                              # every event frame, resends included
        self.escalate: dict[str, Any] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def _run(self) -> None:
        ctx = zmq.Context()
        wpub = ipc.bind(ctx, zmq.PUB, self.run_dir, ipc.WATCHER_PUB)
        epub = ipc.bind(ctx, zmq.PUB, self.run_dir, ipc.EXECUTOR_PUB)
        spool = ipc.bind(ctx, zmq.ROUTER, self.run_dir, ipc.SPOOL_INTAKE)
        vsub = ipc.subscriber(ctx, self.run_dir, ipc.VERIFIER_PUB, ipc.T_ESCALATE)
        poller = zmq.Poller()
        poller.register(spool, zmq.POLLIN)
        poller.register(vsub, zmq.POLLIN)
        self._ready.set()
        last = 0.0
        while not self._stop.is_set():
            events = dict(poller.poll(50))
            if spool in events:
                while spool.poll(0):
                    ident, *frames = spool.recv_multipart()
                    if not self.spool_up:
                        continue
                    _, ev = ipc.decode(frames)
                    with self.lock:
                        self.received += 1
                        self.events[ev["event_id"]] = ev
                    spool.send_multipart([ident, *ipc.encode(ipc.T_ACK, {"ids": [ev["event_id"]]})])
            if vsub in events:
                while vsub.poll(0):
                    _, body = ipc.decode(vsub.recv_multipart())
                    with self.lock:
                        self.escalate = body["notices"]
            if time.monotonic() - last >= 0.2:
                last = time.monotonic()
                with self.lock:
                    if self.contract is not None:
                        ipc.send(wpub, ipc.T_CONTRACT, {"source": "bundle", "contract": self.contract})
                    ipc.send(wpub, ipc.T_NOTICE, {"gen": 1, "active": list(self.active),
                                                  "withdrawn": list(self.withdrawn), "counters": dict(self.counters),
                                                  "started_at": 1.0})
                    ipc.send(epub, ipc.T_PROGRESS, {"notices": dict(self.progress)})
        ctx.destroy(linger=0)

    def of_type(self, type_: str, notice_id: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events.values()
                    if e["type"] == type_ and (notice_id is None or e["notice_id"] == notice_id)]

    def verdict_events(self, notice_id: str) -> list[dict[str, Any]]:
        return self.of_type("drain.done", notice_id) + self.of_type("drain.overrun", notice_id)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


class VerifierProcess:
    """``python -m verifier`` with a config in ``base``; stderr (its log) kept in a file."""

    def __init__(self, base: str, run_dir: str, **sections: dict[str, Any]) -> None:
        self.base = base
        self.config_path = os.path.join(base, "agent.toml")
        self.state_dir = os.path.join(base, "state")
        self.log_path = os.path.join(base, "verifier.log")
        settings: dict[str, dict[str, Any]] = {
            "node": {"name": "node-a", "scheduler": "none"},
            "paths": {"runtime_dir": run_dir, "state_dir": self.state_dir},
        }
        for name, table in sections.items():
            settings.setdefault(name, {}).update(table)
        write_config(self.config_path, settings)
        self.proc: subprocess.Popen | None = None

    def start(self) -> VerifierProcess:
        env = dict(os.environ, PYTHONPATH=REPO)
        starts = self.log().count("process.started")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "verifier", "--config", self.config_path],
                                         cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.log().count("process.started") > starts, 10, "the verifier to start")
        return self

    def kill(self) -> None:
        """SIGKILL: no chance to flush or save anything."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> int:
        if self.proc is None:
            return 0
        self.proc.terminate()
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
        finally:
            self.proc = None

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""
