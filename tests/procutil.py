"""Helpers the test rigs share: free ports, waiting with a deadline, finding tools, stopping by PID."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import sysconfig
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], T], timeout: float, what: str | Callable[[], str] = "the condition",
             interval: float = 0.05, retry_on: tuple[type[Exception], ...] = (Exception,)) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); TimeoutError at the deadline.

    The one wait of the suite: every test that reads a log, file, counter or request list that
    another thread or process fills waits here for what it asserts, never sleeps and hopes.
    ``what`` names the condition in the error (a callable is asked only then, for the last state).
    A predicate that raises one of ``retry_on`` is retried (the thing may not be up yet; the last
    error is reported); anything else propagates at once -- e.g. "the process exited".
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    value: T | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last_error = None
        except retry_on as e:
            last_error = e
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    desc = what() if callable(what) else what
    detail = f"last error: {last_error!r}" if last_error else f"last value: {value!r:.300}"
    raise TimeoutError(f"timed out after {timeout}s waiting for {desc} ({detail})")


def at_least(n: int, items: Callable[[], list[T]]) -> Callable[[], list[T] | None]:
    """A wait_for predicate: ``items()`` once it holds ``n`` or more (the caller asserts the exact list)."""
    def enough() -> list[T] | None:
        found = items()
        return found if len(found) >= n else None
    return enough


def venv_tool(name: str) -> str:
    """A command installed with this interpreter's packages (the test extra): kubectl, nats-server...

    Looked up next to ``sys.executable`` (the venv the tests run in), then in this interpreter's
    scripts directory, then on PATH -- never at a path of one particular machine.
    """
    for directory in (os.path.dirname(sys.executable), sysconfig.get_path("scripts")):
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found next to {sys.executable} nor on PATH: "
                                "install the test extra (pip install '.[test]', as tests/run.sh does)")
    return found


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_pid(pid: int, expect_cmd: str, timeout: float = 10.0) -> None:
    """SIGTERM then SIGKILL ``pid`` -- only if its command line still contains ``expect_cmd``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return
    if expect_cmd not in cmdline:
        return   # the PID was reused by something that is not ours
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
