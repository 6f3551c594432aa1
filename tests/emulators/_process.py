"""Run an emulator as its own process: the command line, and the fixture side.

``serve_main`` is the body of ``python -m tests.emulators.<name>``: bind, write
the ready file (atomically, so a reader never sees half of it), serve until
SIGTERM/SIGINT, exit 0. ``EmulatorProcess`` starts one, waits for its ready
file with a deadline, and stops it by PID.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common.fsutil import write_atomic
from tests.emulators._server import EmulatorApp, EmulatorServer

REPO_ROOT = Path(__file__).resolve().parents[2]


def serve_main(argv: Sequence[str] | None, prog: str,
               add_arguments: Callable[[argparse.ArgumentParser], None],
               build_app: Callable[[argparse.Namespace], EmulatorApp]) -> int:
    """Parse the common options, serve the app, return the exit code."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port")
    parser.add_argument("--ready-file", help="written (JSON: url, control_url, pid) once serving")
    parser.add_argument("--seed", type=int, default=None, help="seed for probabilistic faults")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        app = build_app(args)
        server = EmulatorServer(app, args.host, args.port, args.seed)
    except (OSError, ValueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    info = {"url": server.url, "control_url": server.control_url, "port": server.port,
            "pid": os.getpid()}
    if args.ready_file:
        write_atomic(args.ready_file, json.dumps(info).encode(), mode=0o644)
    print(json.dumps(info), flush=True)
    stop.wait()
    server.stop()
    return 0


class EmulatorProcess:
    """One emulator subprocess, started and stopped by PID."""

    def __init__(self, module: str, args: Sequence[str], workdir: Path,
                 start_timeout: float = 15.0) -> None:
        self.module = module
        self.args = list(args)
        self.workdir = Path(workdir)
        self.start_timeout = start_timeout
        self.info: dict[str, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("not started")
        return self._proc.pid

    def start(self) -> dict[str, Any]:
        """Launch and wait for the ready file; the ready info (url, control_url, pid)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        ready = self.workdir / "ready.json"
        ready.unlink(missing_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        # Output goes to files, not pipes: a chatty child must never block on a full pipe.
        with open(self.workdir / "stdout.log", "wb") as out, \
                open(self.workdir / "stderr.log", "wb") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", self.module, "--port", "0", "--ready-file", str(ready),
                 *self.args], cwd=REPO_ROOT, env=env, stdout=out, stderr=err)
        deadline = time.monotonic() + self.start_timeout
        while not ready.exists():
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.module} exited {self._proc.returncode}: "
                                   f"{(self.workdir / 'stderr.log').read_text()[-2000:]}")
            if time.monotonic() >= deadline:
                self.stop()
                raise TimeoutError(f"{self.module} not ready within {self.start_timeout} s")
            time.sleep(0.02)
        self.info = json.loads(ready.read_text())
        return self.info

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        # proc.send_signal checks the child was not reaped already, so a PID is never reused.
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            return proc.wait(timeout)
