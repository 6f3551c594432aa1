"""The watcher as a process, with what it talks to faked: a spool that acks, a SUB on watcher.pub.

    with WatcherRig(tmp_path, relay=[nats.url], provider="aws", url=emu.url) as rig:
        rig.wait_notice(lambda n: n["kind"] == "reclaim")

``WatcherRig`` writes the config, starts ``python -m watcher --config`` and
stops it by PID; ``FakeSpool`` and ``NoticeSub`` each own one zmq socket in
their own thread (sockets are not thread-safe) and keep what they received.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Self

import ujson
import zmq

from common import ipc
from tests.agent_rig import REPO, write_config
from tests.procutil import at_least, wait_for


class FakeSpool:
    """A ROUTER on spool.intake that acknowledges every event and keeps them."""

    def __init__(self, ctx: zmq.Context, runtime_dir: str) -> None:
        self.events: list[dict[str, Any]] = []
        self._ctx, self._dir = ctx, runtime_dir
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> FakeSpool:
        self._thread.start()
        self._ready.wait(5)
        return self

    def _run(self) -> None:
        sock = ipc.bind(self._ctx, zmq.ROUTER, self._dir, ipc.SPOOL_INTAKE)
        self._ready.set()
        try:
            while not self._stop.is_set():
                if not sock.poll(50):
                    continue
                ident, *frames = sock.recv_multipart()
                topic, body = ipc.decode(frames)
                if topic == ipc.T_EVENT:
                    self.events.append(body)
                    sock.send_multipart([ident, *ipc.encode(ipc.T_ACK, {"ids": [body["event_id"]]})])
        finally:
            sock.close(0)

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        # Resends after a slow ack are the same event: count each event id once.
        seen, out = set(), []
        for ev in list(self.events):
            if ev["type"] == type_ and ev["event_id"] not in seen:
                seen.add(ev["event_id"])
                out.append(ev)
        return out

    def wait_of_type(self, type_: str, n: int = 1, timeout: float = 10.0) -> list[dict[str, Any]]:
        """``of_type(type_)`` once it has ``n`` events or more (then the caller asserts the exact list).

        The watcher sends events on its spool link and notice state on its PUB socket: two sockets,
        two receiving threads here, so what the state shows may be ahead of the events received.
        """
        return wait_for(at_least(n, lambda: self.of_type(type_)), timeout,
                        lambda: f"{n} {type_} event(s), have {len(self.of_type(type_))}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class NoticeSub:
    """A SUB on watcher.pub: every notice state received, with our receive time."""

    def __init__(self, ctx: zmq.Context, runtime_dir: str) -> None:
        self.states: list[tuple[float, dict[str, Any]]] = []
        self.on_state: Callable[[float, dict[str, Any]], None] | None = None
        self._ctx, self._dir = ctx, runtime_dir
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> NoticeSub:
        self._thread.start()
        return self

    def _run(self) -> None:
        sock = ipc.subscriber(self._ctx, self._dir, ipc.WATCHER_PUB, ipc.T_NOTICE)
        try:
            while not self._stop.is_set():
                if not sock.poll(50):
                    continue
                frames = sock.recv_multipart()
                t = time.time()
                _, body = ipc.decode(frames)
                self.states.append((t, body))
                if self.on_state is not None:
                    self.on_state(t, body)
        finally:
            sock.close(0)

    @property
    def latest(self) -> dict[str, Any]:
        return self.states[-1][1] if self.states else {}

    def active(self) -> list[dict[str, Any]]:
        return list(self.latest.get("active") or [])

    def counters(self) -> dict[str, int]:
        return dict(self.latest.get("counters") or {})

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class WatcherRig:
    """One watcher process with a fake spool and a notice subscriber, in ``base``."""

    def __init__(self, base: str, relay: list[str] | None = None, provider: str = "none", url: str = "",
                 node: str = "node-a", hall: str = "h1", interval_s: float = 0.3,
                 extra: dict[str, dict[str, Any]] | None = None) -> None:
        self.base = str(base)
        self.run_dir = os.path.join(self.base, "run")
        os.makedirs(self.run_dir, mode=0o700, exist_ok=True)
        self.config_path = os.path.join(self.base, "watcher.toml")
        self.log_path = os.path.join(self.base, "watcher.log")
        metadata: dict[str, Any] = {"provider": provider, "poll_interval_s": interval_s, "timeout_s": 1.0}
        if url:
            metadata["url"] = url
        sections: dict[str, dict[str, Any]] = {
            "node": {"name": node, "hall": hall},
            "paths": {"runtime_dir": self.run_dir, "state_dir": os.path.join(self.base, "state")},
            "relay": {"servers": list(relay or [])},
            "metadata": metadata,
        }
        for section, table in (extra or {}).items():
            sections.setdefault(section, {}).update(table)
        write_config(self.config_path, sections)
        self.ctx = zmq.Context()
        self.spool = FakeSpool(self.ctx, self.run_dir)
        self.sub = NoticeSub(self.ctx, self.run_dir)
        self.proc: subprocess.Popen | None = None

    def start(self) -> WatcherRig:
        self.spool.start()
        self.start_watcher()
        self.sub.start()
        wait_for(lambda: self.sub.states, 15, "the watcher's first announce")
        return self

    def start_watcher(self) -> None:
        env = dict(os.environ, PYTHONPATH=REPO)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "watcher", "--config", self.config_path],
                                         cwd=REPO, env=env, stdout=log, stderr=log)

    def stop_watcher(self, sig_kill: bool = False) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.kill() if sig_kill else proc.terminate()
        try:
            return proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_records(self) -> list[dict[str, Any]]:
        out = []
        with open(self.log_path, errors="replace") as f:
            for line in f:
                try:
                    out.append(ujson.loads(line))
                except ValueError:
                    out.append({"msg": "<not json>", "line": line})
        return out

    def wait_notice(self, match: Callable[[dict[str, Any]], bool], timeout: float = 10.0) -> dict[str, Any]:
        """The first active notice (as announced) that ``match`` accepts; fails at the deadline."""
        def found() -> dict[str, Any] | None:
            return next((n for n in self.sub.active() if match(n)), None)
        return wait_for(found, timeout, "a matching active notice", interval=0.01)

    def wait_counter(self, name: str, at_least: int = 1, timeout: float = 10.0) -> int:
        return wait_for(lambda: self.sub.counters().get(name, 0) >= at_least and self.sub.counters()[name],
                        timeout, f"counter {name} >= {at_least}")

    def stop(self) -> None:
        self.stop_watcher()
        self.sub.stop()
        self.spool.stop()
        self.ctx.destroy(linger=0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
