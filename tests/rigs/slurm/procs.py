"""Process identity and signalling for the rig: never signal a PID that is no longer ours.

The Slurm daemons fork into the background and delete their pid files on exit, so the
rig records each PID right after start together with the process's start time (field 22
of /proc/PID/stat). Before any signal the start time, comm and command line are read
again: a PID the kernel has handed to another process fails the check and is left alone.
"""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class Proc:
    """One process as the rig knows it: enough to recognise it again later."""

    pid: int
    starttime: int
    comm: str
    marker: str = ""  # a string its command line must contain ("" = no check)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Proc:
        return cls(int(data["pid"]), int(data["starttime"]), str(data["comm"]), str(data.get("marker", "")))


def _stat(pid: int) -> tuple[str, str, int] | None:
    """(comm, state, starttime) of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    # comm is in parentheses and may itself hold spaces or ')': split at the last one.
    head, _, rest = raw.rpartition(")")
    comm = head.partition("(")[2]
    fields = rest.split()
    return comm, fields[0], int(fields[19])


def cmdline(pid: int) -> str:
    """The command line of ``pid`` with NULs as spaces ("" if gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def identify(pid: int, marker: str = "") -> Proc | None:
    """Record ``pid`` as it is now, or None if it is gone or already a zombie."""
    st = _stat(pid)
    if st is None or st[1] in ("Z", "X"):
        return None
    return Proc(pid, st[2], st[0], marker)


def is_alive(proc: Proc) -> bool:
    """True while the very process recorded in ``proc`` runs.

    A zombie counts as gone: the daemons are re-parented to PID 1, which may reap late,
    and a zombie can neither run nor be signalled usefully.
    """
    st = _stat(proc.pid)
    if st is None or st[1] in ("Z", "X") or st[2] != proc.starttime or st[0] != proc.comm:
        return False
    return not proc.marker or proc.marker in cmdline(proc.pid)


def send(proc: Proc, sig: int) -> bool:
    """Signal ``proc`` only if it is still the same process; True if the signal was sent."""
    if not is_alive(proc):
        return False
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_gone(procs: Iterable[Proc], timeout: float) -> list[Proc]:
    """Poll until every process has exited or ``timeout`` passes; returns those still alive."""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if is_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if is_alive(p)]
    return alive


def terminate(procs: Iterable[Proc], term_timeout: float, kill_timeout: float = 5.0) -> list[Proc]:
    """SIGTERM all at once, SIGKILL what is left after ``term_timeout``; returns survivors.

    All get the signal together so the ~2 s each daemon takes to exit overlap.
    """
    procs = list(procs)
    for p in procs:
        send(p, signal.SIGTERM)
    alive = wait_gone(procs, term_timeout)
    for p in alive:
        send(p, signal.SIGKILL)
    return wait_gone(alive, kill_timeout)


def kill_now(procs: Iterable[Proc], timeout: float = 5.0) -> list[Proc]:
    """SIGKILL each process that is still the recorded one; returns survivors after ``timeout``."""
    procs = list(procs)
    for p in procs:
        send(p, signal.SIGKILL)
    return wait_gone(procs, timeout)


def environ(pid: int) -> dict[str, str]:
    """The initial environment of ``pid`` ({} if gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def scan(match: Callable[[dict[str, str]], bool], exclude: Iterable[int] = ()) -> list[tuple[Proc, dict[str, str]]]:
    """(process, environment) of every live process whose environment satisfies ``match``.

    Processes that vanish or cannot be read mid-scan are skipped.
    """
    skip = set(exclude)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        pid = int(name)
        # Identify before reading environ, so a PID reused mid-scan fails the later check.
        proc = identify(pid)
        if proc is None:
            continue
        env = environ(pid)
        if match(env):
            found.append((proc, env))
    return found


def rig_strays(conf_path: str, marker_var: str, marker: str,
               exclude: Iterable[int]) -> tuple[list[Proc], list[Proc]]:
    """(job processes, helper daemons) of one Slurm rig, found without asking any daemon.

    Job processes carry SLURM_JOB_ID and the rig's SLURM_CONF (slurmd sets it even for
    --export=NONE); slurmstepd counts with them. slurmscriptd and other helpers inherit
    ``marker_var=marker`` from the daemons' environment. A job process that exec'd with a
    cleared environment is still found below its stepd. Not `scontrol listpids`: at step
    start it reports PID -1 and every process of process group 0 (PID 1, kernel threads).
    """
    skip = set(exclude)
    jobs, helpers = [], []
    for proc, env in scan(lambda env: env.get("SLURM_CONF") == conf_path, exclude=skip):
        if "SLURM_JOB_ID" in env or proc.comm == "slurmstepd":
            jobs.append(proc)
        elif env.get(marker_var) == marker:
            helpers.append(proc)
    known = skip | {p.pid for p in jobs}
    jobs += [p for p in descendants(p.pid for p in jobs) if p.pid not in known]
    return jobs, helpers


def descendants(roots: Iterable[int]) -> list[Proc]:
    """Every live process below ``roots`` in the process tree (the roots themselves excluded)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            ppid = _ppid(int(name))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(name))
    found, todo = [], list(roots)
    while todo:
        for pid in children.get(todo.pop(), []):
            proc = identify(pid)
            if proc is not None:
                found.append(proc)
                todo.append(pid)
    return found


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().decode(errors="replace").rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def ancestors(pid: int | None = None) -> set[int]:
    """``pid`` (default: this process) and all its ancestors: never to be signalled by the rig."""
    pid = os.getpid() if pid is None else pid
    chain = set()
    while pid and pid > 0 and pid not in chain:
        chain.add(pid)
        pid = _ppid(pid) or 0
    return chain
