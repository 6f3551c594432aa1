"""The spool process for tests: a config, the process itself (started and killed by PID), a sender.

    cfg = spool_config(tmp_path, vector_url=vec.url)
    with SpoolProcess(cfg) as sp, Sender(cfg) as tx:
        tx.emit(100)
        tx.wait_acked(100)

The process runs as ``python -m spool --config X`` directly (not under
supervisord), so a test can SIGKILL and restart it quickly. ``Sender`` is a
real ``SpoolLink`` driven by its own thread, resending unacknowledged events
the way every agent process does (every 0.5 s here instead of 2 s, to keep
tests short).
"""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Self

import ujson
import zmq

from common.config import Config, load
from common.log import Logger
from common.runtime import SpoolLink
from spool.reader import iter_records
from tests.support.agent_rig import write_config
from tests.support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]


def spool_config(base: Path, state_dir: Path | None = None, **spool: Any) -> Path:
    """An agent config for the spool alone, under ``base``; keyword args go to [spool]."""
    base.mkdir(parents=True, exist_ok=True)
    path = base / "agent.toml"
    write_config(str(path), {
        "node": {"name": "node-a", "hall": "h1"},
        "paths": {"runtime_dir": str(base / "run"), "state_dir": str(state_dir or base / "state")},
        "spool": {"size_mb": 4, **spool},
    })
    return path


def spool_file(config: Path) -> str:
    return os.path.join(load(str(config)).paths.state_dir, "spool.dat")


def file_events(config: Path, from_head: bool = False) -> list[dict[str, Any]]:
    """Every event in the spool file, oldest first, read with the operator's read-only reader."""
    return [ujson.loads(r.payload) for r in iter_records(spool_file(config), from_head=from_head)]


class SpoolProcess:
    """``python -m spool`` as a child; every start appends to one log file."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.log_path = config.parent / "spool.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "spool", "--config", str(self.config)],
                                         cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, signum: int) -> None:
        # Popen.send_signal never signals a PID that was already reaped (and maybe reused).
        assert self.proc is not None
        self.proc.send_signal(signum)

    def kill(self) -> int:
        self.signal(signal.SIGKILL)
        return self.wait()

    def wait(self, timeout: float = 10.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.proc.wait(timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(ujson.loads(line))
            except ValueError:
                continue
        return out

    def logged(self, msg: str) -> list[dict[str, Any]]:
        return [r for r in self.log_records() if r.get("msg") == msg]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Sender(threading.Thread):
    """A real SpoolLink in a thread: emits on request or at a steady rate, resends until acknowledged."""

    def __init__(self, config: Path, rate_hz: float = 0.0, resend_after_s: float = 0.5,
                 process: str = "executor") -> None:
        super().__init__(name="sender", daemon=True)
        self.process = process
        self.cfg: Config = load(str(config))
        self.rate_hz = rate_hz
        self.resend_after_s = resend_after_s
        self.lock = threading.Lock()
        self.emitted: list[str] = []
        self._requests = 0
        self._stopping = threading.Event()
        self._link: SpoolLink | None = None
        self._ready = threading.Event()

    def run(self) -> None:
        ctx = zmq.Context()
        try:
            with self.lock:
                self._link = SpoolLink(ctx, self.cfg, self.process, Logger("sender", stream=io.StringIO()))
                self._link.outbox.resend_after_s = self.resend_after_s
            self._ready.set()
            poller = zmq.Poller()
            poller.register(self._link.sock, zmq.POLLIN)
            next_emit = time.monotonic()
            while not self._stopping.is_set():
                ready = poller.poll(5)
                with self.lock:
                    if ready:
                        self._link.on_readable()
                    now = time.monotonic()
                    while self.rate_hz and now >= next_emit:
                        self._emit_one()
                        next_emit += 1 / self.rate_hz
                    while self._requests:
                        self._emit_one()
                        self._requests -= 1
                    self._link.tick()
        finally:
            if self._link is not None:
                self._link.close()
            ctx.destroy(linger=0)

    def _emit_one(self) -> None:
        assert self._link is not None
        n = len(self.emitted)
        ev = self._link.emit("drain.evicted", data={"n": n, "pad": "x" * 200})
        self.emitted.append(ev["event_id"])

    def emit(self, n: int) -> None:
        with self.lock:
            self._requests += n

    def set_rate(self, rate_hz: float) -> None:
        with self.lock:
            self.rate_hz = rate_hz

    def pending(self) -> int:
        with self.lock:
            return self._requests + (len(self._link.outbox.pending) if self._link else 0)

    def acked(self) -> list[str]:
        """Ids the spool acknowledged, in emission order."""
        with self.lock:
            pending = set(self._link.outbox.pending) if self._link else set()
            return [i for i in self.emitted if i not in pending]

    def acked_count(self) -> int:
        with self.lock:
            return len(self.emitted) - (len(self._link.outbox.pending) if self._link else 0)

    def wait_acked(self, count: int, timeout: float = 10.0) -> None:
        wait_for(lambda: self.acked_count() >= count, timeout, f"{count} events acknowledged")

    def wait_all_acked(self, timeout: float = 10.0) -> None:
        wait_for(lambda: self.pending() == 0, timeout, "every event acknowledged")

    def __enter__(self) -> Self:
        self.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self.join(5)
