"""The real executor process (``python -m executor``) on a Slurm node, with fake peers around it.

    with ExecutorHarness(rig, drain={...}, slurm={...}) as h:
        h.start()                       # the executor, as supervisord would run it
        n = h.announce()                # the watcher's notice state, re-sent every 0.2 s
        h.wait_event("drain.node_empty", n["id"])

Plays the executor's neighbours on their real sockets: the watcher (PUB ``watcher.pub``:
notice state and contract), the spool (ROUTER ``spool.intake``: stores and acknowledges
events) and the verifier (SUB ``executor.pub``: progress). A thread pumps them; everything
is stopped by PID at exit.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Self

import zmq

from common import ipc
from common.contract import Contract
from common.timefmt import format_rfc3339
from tests.rigs.slurm_rig import SlurmRig
from tests.support.agent_rig import write_config
from tests.support.fake_spool import SpoolInbox
from tests.support.notices import new_id, notice_dict
from tests.support.procutil import stop_pid
from tests.support.wait import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HALL = "h1"


def contract(drain: dict[str, int], slurm: dict[str, str], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``extra``: more top-level contract fields (``kinds``, ``start``)."""
    return Contract.from_payload({"serial": 1, "hall": HALL, "issued_at": format_rfc3339(time.time()),
                                  "drain": drain, "slurm": slurm, **(extra or {})}).to_dict()


class ExecutorHarness:
    def __init__(self, rig: SlurmRig, drain: dict[str, int], slurm: dict[str, str],
                 env: dict[str, str] | None = None, settings: dict[str, Any] | None = None,
                 contract_extra: dict[str, Any] | None = None) -> None:
        """``env``: added to the executor's environment; ``settings``: added to its slurm section;
        ``contract_extra``: more contract fields."""
        self.rig = rig
        self.env = dict(env or {})
        # Not pytest's tmp_path: ipc:// paths must fit in a sockaddr_un (108 bytes).
        self.base = tempfile.mkdtemp(prefix="sco-sd-", dir="/tmp")
        self.run_dir = os.path.join(self.base, "run")
        os.makedirs(self.run_dir, mode=0o700)
        self.config_path = os.path.join(self.base, "agent.toml")
        self.log_path = os.path.join(self.base, "executor.log")
        write_config(self.config_path, {
            "node": {"name": rig.node_name, "hall": HALL, "scheduler": "slurm"},
            "paths": {"runtime_dir": self.run_dir, "state_dir": os.path.join(self.base, "state")},
            "relay": {"servers": []}, "metadata": {"provider": "none"},
            "slurm": {"conf": rig.conf_path, **(settings or {})},
            "agent_socket": {"path": os.path.join(self.run_dir, "agent.sock")},
        })
        self.contract = contract(drain, slurm, contract_extra)
        self.notice_state: dict[str, Any] = {"gen": 0, "active": [], "withdrawn": []}
        self.spool = SpoolInbox()
        self.progress: dict[str, Any] = {}
        self.proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._dirty = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, daemon=True)

    # -- lifecycle -----------------------------------------------------------------
    def __enter__(self) -> Self:
        self.ctx = zmq.Context()
        self.pub = ipc.bind(self.ctx, zmq.PUB, self.run_dir, ipc.WATCHER_PUB)
        self.router = ipc.bind(self.ctx, zmq.ROUTER, self.run_dir, ipc.SPOOL_INTAKE)
        self.sub = ipc.subscriber(self.ctx, self.run_dir, ipc.EXECUTOR_PUB, ipc.T_PROGRESS)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_executor()
        self._stop.set()
        self._thread.join(timeout=5)
        self.ctx.destroy(linger=0)
        shutil.rmtree(self.base, ignore_errors=True)

    def start(self) -> int:
        """Start the executor (`python -m executor --config ...`); returns its PID."""
        env = dict(os.environ, PYTHONPATH=REPO, **self.env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "executor", "--config", self.config_path],
                                         cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self.proc.pid

    def kill_executor(self) -> None:
        """SIGKILL, as a crash would: no clean-up of any kind."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def stop_executor(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid, "executor")
            self.proc.wait(timeout=10)
            self.proc = None

    # -- the watcher's side ------------------------------------------------------------
    def announce(self, deadline_in: float = 120.0, kind: str = "reclaim", *, also: bool = False) -> dict[str, Any]:
        """A new notice; ``also``: next to those active (else in their place)."""
        n = notice_dict(new_id(), kind, node=self.rig.node_name, deadline_in=deadline_in, received_in=0.0,
                        instance_id="", source="sco")
        with self._lock:
            active = [*self.notice_state["active"], n] if also else [n]
            self.notice_state = {"gen": self.notice_state["gen"] + 1, "active": active, "withdrawn": []}
            self._dirty = True  # the watcher publishes a change at once, not at the next re-announcement
        return n

    def withdraw(self, notice_id: str) -> None:
        """The notice's cancel arrived: it leaves ``active`` and is listed in ``withdrawn``."""
        with self._lock:
            active = [n for n in self.notice_state["active"] if n["id"] != notice_id]
            self.notice_state = {"gen": self.notice_state["gen"] + 1, "active": active, "withdrawn": [notice_id]}
            self._dirty = True

    # -- observations ------------------------------------------------------------------
    def events_of(self, type: str, notice_id: str | None = None) -> list[dict[str, Any]]:
        return self.spool.of_type(type, notice_id)

    def wait_event(self, type: str, notice_id: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        return wait_for(lambda: (self.events_of(type, notice_id) or [None])[0], timeout,
                        f"event {type} (log: {self.log_tail()})")

    def record(self, notice_id: str) -> dict[str, Any]:
        with self._lock:
            return dict(self.progress.get(notice_id) or {})

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return " / ".join(f.read().splitlines()[-lines:])
        except OSError:
            return ""

    def log_lines(self) -> list[str]:
        with open(self.log_path, errors="replace") as f:
            return f.read().splitlines()

    # -- the pump ------------------------------------------------------------------------
    def _pump(self) -> None:
        import ujson

        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        poller.register(self.sub, zmq.POLLIN)
        last = 0.0
        while not self._stop.is_set():
            if self._dirty or time.monotonic() - last >= 0.2:
                with self._lock:
                    state = dict(self.notice_state)
                    self._dirty = False
                # Contract first, as the watcher does: a subscriber then never meets a notice without it.
                ipc.send(self.pub, ipc.T_CONTRACT, {"contract": self.contract, "source": "bundle"})
                ipc.send(self.pub, ipc.T_NOTICE, state)
                last = time.monotonic()
            ready = dict(poller.poll(10))
            if self.router in ready:
                self.spool.drain(self.router)
            if self.sub in ready:
                while True:
                    try:
                        _, body = self.sub.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    with self._lock:
                        self.progress = ujson.loads(body)["notices"]
