"""The whole agent under a real supervisord, in a temp directory, for end-to-end tests.

``AgentRig`` writes an agent configuration, sets the environment the repo's
supervisord.conf expects, starts supervisord in the foreground as a child, and
stops it (and so every worker) by PID. ``ctl()`` runs the real supervisorctl.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.procutil import pid_alive, stop_pid, venv_tool
from tests.support.wait import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = ("spool", "watcher", "executor", "verifier")


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(path: str, sections: dict[str, dict[str, Any]]) -> None:
    lines = []
    for section, table in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def supervisord_command() -> list[str]:
    """supervisord as the unit starts it (deploy/systemd/sco-agent.service): through the lean launcher, whose
    ``sco-supervisord`` script runs the same main(); run as a module, a venv installed before the script
    existed (an editable install) runs it too. -P: no working directory on sys.path, as for a script."""
    return [sys.executable, "-P", "-m", "supervisord_plugins.launch"]


@contextmanager
def waking(control_socket: str, every_s: float = 0.05) -> Iterator[None]:
    """Connect to supervisord's control socket every ``every_s`` while the block runs.

    Why: supervisord reaps an exited worker only when its poll loop turns, and that loop sleeps
    up to 1 s (supervisord.runforever, ``timeout = 1``): SIGCHLD does not cut the poll short
    (Python retries it, PEP 475), and a worker's stdout EOF wakes it just before the worker is a
    zombie when the worker has threads to tear down. So a stop, which goes one program at a time,
    waits about 1 s per program for nothing. A connection is I/O on the loop's listening socket:
    the loop turns and reaps at once. Nothing else changes -- the same signals, the same order.
    """
    done = threading.Event()

    def wake() -> None:
        while not done.wait(every_s):
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(1.0)
                    s.connect(control_socket)
            except OSError:
                pass   # not listening (yet, or any more): nothing to wake

    thread = threading.Thread(target=wake, name="wake-supervisord", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(5)


class AgentRig:
    def __init__(self, base: str, settings: dict[str, dict[str, Any]]) -> None:
        self.base = base
        self.run_dir = os.path.join(base, "run")          # the agent's runtime_dir (IPC sockets)
        self.sup_dir = os.path.join(base, "supervisor")   # supervisord socket and pid
        self.log_dir = os.path.join(base, "log")
        self.state_dir = os.path.join(base, "state")
        for d in (self.sup_dir, self.log_dir, self.state_dir):
            os.makedirs(d, mode=0o700, exist_ok=True)
        self.config_path = os.path.join(base, "agent.toml")
        merged: dict[str, dict[str, Any]] = {
            "paths": {"runtime_dir": self.run_dir, "state_dir": self.state_dir},
            "agent_socket": {"path": os.path.join(self.run_dir, "agent.sock")},
        }
        for section, table in settings.items():
            merged.setdefault(section, {}).update(table)
        self.settings = merged
        write_config(self.config_path, merged)
        self.proc: subprocess.Popen | None = None
        # More for the environment (a test's fault injection); PYTHONPATH is put before the checkout's.
        self.extra_env: dict[str, str] = {}

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        bindir = os.path.dirname(sys.executable)
        # PYTHONPATH: the workers run this checkout's code even where another copy is installed.
        env.update(SCO_AGENT_CONFIG=self.config_path, SCO_AGENT_RUN_DIR=self.sup_dir,
                   SCO_AGENT_LOG_DIR=self.log_dir, PATH=bindir + os.pathsep + env.get("PATH", ""),
                   PYTHONPATH=REPO)
        for key, value in self.extra_env.items():
            env[key] = value + os.pathsep + env[key] if key == "PYTHONPATH" else value
        return env

    def start(self, wait: bool = True) -> AgentRig:
        # systemd's RuntimeDirectory= at every start (deploy/systemd/sco-agent.service): a unit
        # restart (tests/chaos/inject.py) removed them.
        for d in (self.run_dir, self.sup_dir):
            os.makedirs(d, mode=0o700, exist_ok=True)
        with open(os.path.join(self.log_dir, "supervisord.out"), "ab") as out:
            # A session of its own, as a unit has a cgroup of its own: every worker inherits it (supervisord
            # only setpgrp()s them), so tests/chaos/inject.py finds the whole unit, orphans included.
            self.proc = subprocess.Popen([*supervisord_command(), "-c", os.path.join(REPO, "supervisord.conf")],
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=self.base,
                                         start_new_session=True)
        if wait:
            wait_for(self.all_running, 30, "every program RUNNING")
        return self

    def ctl(self, *args: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run([venv_tool("supervisorctl"), "-c", os.path.join(REPO, "supervisord.conf"), *args],
                              env=self.env, capture_output=True, text=True, timeout=60, check=check)

    def status(self) -> dict[str, tuple[str, int]]:
        """program -> (state, pid) from `supervisorctl status`."""
        out = self.ctl("status").stdout
        result = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in PROGRAMS:
                pid = 0
                if "pid" in parts:
                    pid = int(parts[parts.index("pid") + 1].rstrip(","))
                result[parts[0]] = (parts[1], pid)
        return result

    def all_running(self) -> bool:
        st = self.status()
        return len(st) == len(PROGRAMS) and all(s == "RUNNING" for s, _ in st.values())

    def pid(self, program: str) -> int:
        return self.status()[program][1]

    def log(self, program: str) -> str:
        try:
            with open(os.path.join(self.log_dir, f"{program}.log"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        pids = [pid for _, pid in self.status().values() if pid] if pid_alive(self.proc.pid) else []
        with waking(os.path.join(self.sup_dir, "supervisor.sock")):
            stop_pid(self.proc.pid, "supervisord", timeout=30)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.05)
        leftovers = [p for p in pids if pid_alive(p)]
        assert not leftovers, f"workers outlived supervisord: {leftovers}"
