"""Carrying faults out on a running Stack: apply at the planned moment, revert at its end.

Every fault is undone by its own ``revert`` (a rule removed by id, a server
started again, a filler file deleted), so faults on different targets overlap
freely; the plan keeps two faults on one target apart (tests/chaos/plan.py).

``kill_supervisord`` and ``unit_restart`` play systemd restarting the agent's unit
(deploy/systemd/sco-agent.service, systemd.kill(5) and systemd.exec(5)): supervisord
crashed (SIGKILL), or ``systemctl restart``. Either way systemd stops the unit the
same way -- SIGTERM to every process left in its control group (KillMode=control-group),
SIGKILL to whatever is still there after TimeoutStopSec= -- and removes the
RuntimeDirectory= directories (the agent's runtime dir and supervisord's, under it)
before it starts the unit again: RuntimeDirectoryPreserve=restart keeps them across
Restart=, but a stop and start does not, nor a reboot, and the agent must not rely
on them. The harness does all of it to the rig, the runtime directories removed for
good measure every time; the revert (after the fault's duration, RestartSec=) starts
supervisord again on the same configuration and state directory, as systemd does.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import psutil

from tests.chaos.plan import RESTARTS, Fault
from tests.support.agent_rig import AgentRig
from tests.support.wait import wait_for

FILLER = "chaos-filler"
API_HANG_S = 3.0        # > the agent's kubernetes.timeout_s (2 s): a timeout, not a slow answer
METADATA_HANG_S = 2.0   # > metadata.timeout_s (1 s)
VECTOR_SLOW_S = 1.5     # < the shipper's timeout: slow, not down
# Kafka down behind a running Vector (kafka_400): the kafka sink's delivery times out after
# message_timeout_ms and the batch is Rejected, so each answer comes that late. Vector's default is
# 300 s; this stands for a shortened one, well under the shipper's 45 s timeout, so the shipper hears
# the 400 (a sink failure: it keeps every record and backs off) rather than timing out itself.
KAFKA_HOLD_S = 1.0


# The unit's TimeoutStopSec= is 30 s; every worker stops in well under a second, so this is only
# reached by a bug -- and then the SIGKILL that follows is what systemd would do.
STOP_TIMEOUT_S = 10.0


def control_group(session: int) -> dict[int, psutil.Process]:
    """Every process of the unit: the rig starts supervisord as a session leader, and every process
    it forks (or they fork) stays in that session (supervisord only setpgrp()s its children) -- a
    worker orphaned by supervisord's death, or forked the instant it died, included, as in a cgroup.
    psutil.Process, not bare pids: a pid reused by someone else's process is never signalled."""
    out = {}
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) == session:   # after "(comm)": state ppid pgrp session
                out[pid] = psutil.Process(pid)
        except (OSError, IndexError, ValueError, psutil.Error):
            continue
    return out


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _describe(proc: psutil.Process) -> str:
    """pid, name, state, parent and signal masks: why it outlived SIGTERM."""
    try:
        with open(f"/proc/{proc.pid}/status") as f:
            masks = " ".join(line.strip().replace("\t", "=") for line in f if line[:6] in ("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))
        threads = []
        for tid in sorted(os.listdir(f"/proc/{proc.pid}/task")):
            with open(f"/proc/{proc.pid}/task/{tid}/comm") as f, open(f"/proc/{proc.pid}/task/{tid}/wchan") as g:
                threads.append(f"{tid}:{f.read().strip()}@{g.read().strip()}")
        return f"{proc.pid} {proc.name()} {proc.status()} ppid={proc.ppid()} {masks} threads={threads}"
    except (OSError, psutil.Error):
        return str(proc.pid)


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)   # psutil refuses a pid that now names another process
    except psutil.NoSuchProcess:
        pass


class Stopped(NamedTuple):
    at: float             # epoch, when the stop began
    pids: list[int]       # every process stopped
    sigkilled: bool       # something outlived SIGTERM by the stop timeout
    crash: bool = False   # supervisord was SIGKILLed first
    survivors: tuple[str, ...] = ()   # what outlived SIGTERM: "pid name state"


def systemd_stop(rig: AgentRig, crash: bool, timeout_s: float = STOP_TIMEOUT_S) -> Stopped:
    """Stop the unit as systemd does; ``crash``: supervisord was SIGKILLed first (the main process
    died, Restart= stops what is left). Supervisord is reaped."""
    assert rig.proc is not None
    at = time.time()
    main = psutil.Process(rig.proc.pid)
    sid = main.pid   # the rig's supervisord leads a session of its own
    if crash:   # the main process died; only then does systemd stop what is left of the unit
        _signal(main, signal.SIGKILL)
        rig.proc.wait(timeout=10)
    group = control_group(sid)
    for proc in group.values():   # KillMode=control-group: KillSignal= to every process at once
        _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    sigkilled = False
    while time.monotonic() < deadline:
        group |= control_group(sid)   # a worker supervisord restarts meanwhile is in it too
        if not any(_running(p) for p in group.values()):
            break
        time.sleep(0.02)
    else:   # TimeoutStopSec= passed: SIGKILL to all that is left (supervisord first: no respawn)
        sigkilled = True
        group |= control_group(sid)
        survivors = tuple(_describe(p) for p in group.values() if _running(p))
        for proc in [main, *group.values()]:
            _signal(proc, signal.SIGKILL)
    rig.proc.wait(timeout=10)
    rig.proc = None
    # Orphaned workers are reparented and reaped by init; a zombie counts as dead.
    wait_for(lambda: not any(_running(p) for p in group.values()), 10, "the agent's processes gone")
    return Stopped(at, sorted(group), sigkilled, crash, survivors if sigkilled else ())


def remove_runtime_dirs(rig: AgentRig) -> None:
    """What systemd does with RuntimeDirectory= at the unit's stop: /run/sco-agent and its supervisor
    directory gone, with every socket, status file and fallback copy in them."""
    for d in (rig.run_dir, rig.sup_dir):
        shutil.rmtree(d, ignore_errors=True)


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
        self.restarts: list[Stopped] = []     # each unit restart's stop

    def apply(self, f: Fault) -> bool:
        """Break something; False if the fault could not land (the program was not running)."""
        s = self.stack
        if f.kind.startswith("kill_") and f.kind not in RESTARTS:
            return self._kill(f.kind.removeprefix("kill_"))
        if f.kind in RESTARTS:
            self.restarts.append(systemd_stop(s.agent, crash=f.kind == "kill_supervisord"))
            remove_runtime_dirs(s.agent)
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
        elif f.kind == "kafka_400":
            s.vector.kafka_down(400, KAFKA_HOLD_S)
        elif f.kind == "kafka_500":
            s.vector.kafka_down(500)
        elif f.kind == "disk_full":
            if not self.disk:
                return False
            fill(s.agent.state_dir)
        else:
            raise ValueError(f"unknown fault {f.kind}")
        return True

    def revert(self, f: Fault) -> None:
        s = self.stack
        if f.kind in RESTARTS:
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
        elif f.kind in ("kafka_400", "kafka_500"):
            s.vector.kafka_up()   # also ends the holds of batches waiting on the sink (their answer: 200)
        elif f.kind == "disk_full":
            unfill(s.agent.state_dir)

    def _kill(self, program: str) -> bool:
        state, pid = self.stack.agent.status().get(program, ("", 0))
        if state != "RUNNING" or not pid:
            return False
        os.kill(pid, signal.SIGKILL)
        return True
