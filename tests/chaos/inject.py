"""Carrying faults out on a running Stack: apply at the planned moment, revert at its end.

Every fault is undone by its own ``revert`` (a rule removed by id, a server
started again, a filler file deleted), so faults on different targets overlap
freely; the plan keeps two faults on one target apart (tests/chaos/plan.py).

``systemd_restart`` plays systemd restarting the agent's unit after supervisord
was SIGKILLed: with ``KillMode=control-group`` systemd kills every process left in
the unit's cgroup, so the harness freezes and kills supervisord and all its
descendants, then starts supervisord again on the same configuration, runtime
and state directories.
"""
from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil

from tests.chaos.plan import Fault
from tests.support.agent_rig import AgentRig
from tests.support.procutil import pid_alive
from tests.support.wait import wait_for

FILLER = "chaos-filler"
API_HANG_S = 3.0        # > the agent's kubernetes.timeout_s (2 s): a timeout, not a slow answer
METADATA_HANG_S = 2.0   # > metadata.timeout_s (1 s)
VECTOR_SLOW_S = 1.5     # < the shipper's timeout: slow, not down


def descendants(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_control_group(root: int) -> list[int]:
    """SIGSTOP ``root`` and every descendant until none is new (nothing can fork or respawn
    meanwhile), then SIGKILL them all: what systemd's KillMode=control-group does to a unit."""
    frozen: set[int] = set()
    todo = [root]
    while todo:
        for pid in todo:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
            frozen.add(pid)
        todo = [p for pid in list(frozen) for p in descendants(pid) if p not in frozen]
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sorted(frozen)


def systemd_restart_kill(rig: AgentRig) -> list[int]:
    """The kill half: supervisord and its whole tree SIGKILLed, supervisord reaped."""
    assert rig.proc is not None
    killed = kill_control_group(rig.proc.pid)
    rig.proc.wait(timeout=10)
    rig.proc = None
    # Orphaned workers are reparented and reaped by init; a zombie counts as dead (pid_alive).
    wait_for(lambda: not any(pid_alive(p) for p in killed), 10, "the agent's processes gone")
    return killed


@contextmanager
def tmpfs(path: str, size_mb: int) -> Iterator[bool]:
    """A small tmpfs on ``path``, so the state dir can be filled to the last byte; yields False
    (and the directory stays on its own filesystem) where mounting is not allowed."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", path], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        yield False
        return
    try:
        yield True
    finally:
        # Lazy: a process that still holds a file there must not keep the mount forever.
        subprocess.run(["umount", "-l", path], check=False, capture_output=True, timeout=30)


def fill(directory: str) -> int:
    """Take every free byte of the filesystem under ``directory``; the bytes taken."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    fd = os.open(os.path.join(directory, FILLER), os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        if free:
            os.posix_fallocate(fd, 0, free)
    finally:
        os.close(fd)
    return free


def unfill(directory: str) -> None:
    try:
        os.unlink(os.path.join(directory, FILLER))
    except FileNotFoundError:
        pass


class Injector:
    """Faults on a running Stack (tests.support.stack.Stack with Vector and a tmpfs state dir), and on the
    Slurm rig's controller when ``slurm`` is given."""

    def __init__(self, stack: Any, slurm: Any = None, disk: bool = True) -> None:
        self.stack = stack
        self.slurm = slurm
        self.disk = disk   # the state dir is a tmpfs of its own (else disk_full cannot land)
        self.rule_ids: dict[int, Any] = {}    # id(fault) -> the emulator's rule id

    def apply(self, f: Fault) -> bool:
        """Break something; False if the fault could not land (the program was not running)."""
        s = self.stack
        if f.kind.startswith("kill_") and f.kind != "kill_supervisord":
            return self._kill(f.kind.removeprefix("kill_"))
        if f.kind == "kill_supervisord":
            systemd_restart_kill(s.agent)
        elif f.kind == "slurmctld_restart":
            self.slurm.stop_controller()
        elif f.kind == "nats_restart":
            s.nats.stop()
        elif f.kind == "metadata_error":
            s.meta.fault("status", status=500)
        elif f.kind == "metadata_hang":
            s.meta.fault("hang", seconds=METADATA_HANG_S)
        elif f.kind == "api_500":
            self.rule_ids[id(f)] = s.kube.fault("status", status=500)
        elif f.kind == "api_429":
            self.rule_ids[id(f)] = s.kube.fault("status", status=429, retry_after=1)
        elif f.kind == "api_timeout":
            self.rule_ids[id(f)] = s.kube.fault("hang", seconds=API_HANG_S)
        elif f.kind == "api_slow":
            self.rule_ids[id(f)] = s.kube.fault("delay", seconds=API_HANG_S)
        elif f.kind in ("api_down", "api_down_long"):
            s.kube.down("refuse")
        elif f.kind == "vector_down":
            s.vector.refuse()
        elif f.kind == "vector_slow":
            s.vector.slow(VECTOR_SLOW_S)
        elif f.kind == "disk_full":
            if not self.disk:
                return False
            fill(s.agent.state_dir)
        else:
            raise ValueError(f"unknown fault {f.kind}")
        return True

    def revert(self, f: Fault) -> None:
        s = self.stack
        if f.kind == "kill_supervisord":
            # systemd's Restart= after RestartSec (the fault's duration); it comes up while other faults go on.
            s.agent.start(wait=False)
        elif f.kind == "slurmctld_restart":
            self.slurm.start_controller()
        elif f.kind == "nats_restart":
            s.nats.start()
        elif f.kind in ("metadata_error", "metadata_hang"):
            s.meta.clear_faults()
        elif f.kind in ("api_500", "api_429", "api_timeout", "api_slow"):
            s.kube.remove_fault(self.rule_ids.pop(id(f)))
        elif f.kind in ("api_down", "api_down_long"):
            s.kube.up()
        elif f.kind == "vector_down":
            s.vector.accept()
        elif f.kind == "vector_slow":
            s.vector.clear_faults()
        elif f.kind == "disk_full":
            unfill(s.agent.state_dir)

    def _kill(self, program: str) -> bool:
        state, pid = self.stack.agent.status().get(program, ("", 0))
        if state != "RUNNING" or not pid:
            return False
        os.kill(pid, signal.SIGKILL)
        return True
