"""Processes and ports for the test rigs: free ports, finding tools, stopping by PID (waiting: tests/support/wait.py)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import sysconfig

from tests.support.wait import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    try:
        wait_for(lambda: not pid_alive(pid), timeout, f"{expect_cmd} (pid {pid}) to exit", retry_on=())
        return
    except TimeoutError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
