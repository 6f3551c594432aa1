"""The watcher as a process, with what it talks to faked: a spool that acks, a SUB on watcher.pub.

    with WatcherRig(tmp_path, relay=[nats.url], provider="aws", url=emu.url) as rig:
        rig.wait_notice(lambda n: n["kind"] == "reclaim")

``WatcherRig`` writes the config, starts ``python -m watcher --config`` and
stops it by PID; ``FakeSpool`` (tests/support/fake_spool.py) and ``NoticeSub`` each own one zmq socket in
their own thread (sockets are not thread-safe) and keep what they received.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Self

import ujson
import zmq

from common import ipc
from tests.support.agent_rig import REPO, write_config
from tests.support.fake_spool import FakeSpool
from tests.support.wait import wait_for


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


# The watcher as ``python -m watcher`` runs it, answering SIGUSR1 with what it has loaded: its
# sys.modules and Python threads, written to the file named by SCO_TEST_PROBE (the signal
# handler imports nothing).
PROBE = r"""
import os, runpy, signal, sys, threading

def dump(signum, frame):
    path = os.environ["SCO_TEST_PROBE"]
    with open(path + ".tmp", "w") as f:
        f.write(" ".join(sorted(sys.modules)) + "\n" + " ".join(sorted(t.name for t in threading.enumerate())))
    os.replace(path + ".tmp", path)

signal.signal(signal.SIGUSR1, dump)
sys.argv[0] = "watcher"
runpy.run_module("watcher", run_name="__main__", alter_sys=True)
"""


class WatcherRig:
    """One watcher process with a fake spool and a notice subscriber, in ``base``."""

    def __init__(self, base: str, relay: list[str] | None = None, provider: str = "none", url: str = "",
                 node: str = "node-a", hall: str = "h1", interval_s: float = 0.3,
                 extra: dict[str, dict[str, Any]] | None = None, probe: bool = False) -> None:
        self.base = str(base)
        self.probe_path = os.path.join(self.base, "probe.txt") if probe else ""
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
        self.spool = FakeSpool(self.run_dir, self.ctx)
        self.sub = NoticeSub(self.ctx, self.run_dir)
        self.proc: subprocess.Popen | None = None

    def start(self) -> WatcherRig:
        self.spool.start()
        self.start_watcher()
        self.sub.start()
        wait_for(lambda: self.sub.states, 15, "the watcher's first announce")
        return self

    def start_watcher(self) -> None:
        env = dict(os.environ, PYTHONPATH=REPO, SCO_TEST_PROBE=self.probe_path)
        how = ["-c", PROBE] if self.probe_path else ["-m", "watcher"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, *how, "--config", self.config_path],
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

    def loaded(self) -> tuple[set[str], list[str]]:
        """The running watcher's sys.modules and Python thread names (a rig made with ``probe=True``)."""
        if self.proc is None or not self.probe_path:
            raise RuntimeError("no probed watcher running")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.probe_path)
        self.proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: os.path.exists(self.probe_path), 10, "the watcher's probe file")
        with open(self.probe_path) as f:
            modules, threads = f.read().split("\n")
        return set(modules.split()), threads.split()

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
