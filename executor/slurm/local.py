"""A job's processes found and signalled without Slurm: the way around a dead or hung controller.

When slurmctld does not answer, the executor still has to tell jobs to
checkpoint and, at the contract's cutoffs, stop them. Stopping slurmd is no
way to do it (its jobs keep running), so the executor signals the processes
itself. Two sources name them: ``scontrol listpids`` (slurmstepd's own list,
which works with both daemons down) and a scan of /proc/*/environ for
``SLURM_JOB_ID``.

Neither source is trusted blindly. listpids reports PID -1, PID 1 and kernel
threads for a moment at step start, and a PID can be reused between listing
and signalling, so every PID is checked against its environment right before
the signal: it must carry the job's ``SLURM_JOB_ID`` (and this node's
``SLURMD_NODENAME`` if set), and a process the /proc scan found alone must
also carry this cluster's ``SLURM_CONF`` (another cluster's job on the same
host may have the same id). A process group is signalled only through a
checked leader; the batch shell is one (slurmstepd makes it a group leader).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from executor.slurm.cli import PidRow

PROC = "/proc"
MAX_ENVIRON = 1 << 20


@dataclass(frozen=True, slots=True)
class JobProc:
    """One process of a job on this host."""

    pid: int
    job: int
    pgid: int
    batch_shell: bool  # the job's batch script: signalled alone when the scope is 'batch'
    listed: bool       # slurmstepd listed it (listpids), rather than the /proc scan alone


def read_environ(pid: int, proc: str = PROC) -> dict[str, str] | None:
    """The initial environment of ``pid``; None if it is gone or unreadable."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            raw = f.read(MAX_ENVIRON)
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def owns(env: dict[str, str] | None, job: int, conf: str, node: str, listed: bool) -> bool:
    """Is a process with this environment a process of ``job`` on this node of this cluster?"""
    if not env or env.get("SLURM_JOB_ID") != str(job):
        return False
    if env.get("SLURMD_NODENAME", node) != node:
        return False
    return listed or env.get("SLURM_CONF") == conf


def scan(conf: str, node: str, proc: str = PROC) -> dict[int, int]:
    """pid -> job id of every process whose environment makes it one of this cluster's jobs."""
    me = os.getpid()
    found = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return {}
    for name in names:
        if not (name.isascii() and name.isdigit()) or int(name) == me:
            continue
        env = read_environ(int(name), proc)
        job = (env or {}).get("SLURM_JOB_ID", "")
        if job.isascii() and job.isdigit() and owns(env, int(job), conf, node, listed=False):
            found[int(name)] = int(job)
    return found


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def find(rows: Iterable[PidRow], scanned: dict[int, int], conf: str, node: str,
         proc: str = PROC) -> dict[int, list[JobProc]]:
    """job -> its checked processes, from listpids rows and a /proc scan (either may be empty)."""
    candidates: dict[int, tuple[int, bool, bool]] = {}  # pid -> (job, listed, batch shell per listpids)
    for pid, job in scanned.items():
        candidates[pid] = (job, False, False)
    for r in rows:
        candidates[r.pid] = (r.job, True, r.step == "batch" and r.localid == "0")
    jobs: dict[int, list[JobProc]] = {}
    for pid, (job, listed, first_task) in sorted(candidates.items()):
        env = read_environ(pid, proc)
        pgid = _pgid(pid)
        if pgid is None or not owns(env, job, conf, node, listed):
            continue
        leader_shell = pid == pgid and "SLURM_STEP_ID" not in (env or {})
        jobs.setdefault(job, []).append(JobProc(pid, job, pgid, first_task or leader_shell, listed))
    return jobs


def _still_ours(p: JobProc, conf: str, node: str, proc: str) -> bool:
    """Re-checked right before a signal: the PID may have been reused since it was found."""
    return owns(read_environ(p.pid, proc), p.job, conf, node, p.listed) and _pgid(p.pid) == p.pgid


def signal_job(procs: list[JobProc], sig: int, scope: str, conf: str, node: str,
               proc: str = PROC) -> dict[str, list[int]]:
    """Signal one job's processes; returns {"groups": [pgid...], "pids": [pid...]} actually signalled.

    'batch': the batch shell only (like ``scancel --batch``). 'full': every process group
    led by a checked process of the job, plus any checked process outside those groups.
    """
    never = {0, 1, os.getpgrp()}
    sent: dict[str, list[int]] = {"groups": [], "pids": []}
    if scope == "batch":
        for p in procs:
            if (p.batch_shell and p.pid not in never and _still_ours(p, conf, node, proc)
                    and _kill(p.pid, sig, group=False)):
                sent["pids"].append(p.pid)
        return sent
    leaders = {p.pgid for p in procs if p.pid == p.pgid and p.pgid not in never}
    for p in procs:
        if p.pid in leaders and _still_ours(p, conf, node, proc) and _kill(p.pgid, sig, group=True):
            sent["groups"].append(p.pgid)
    covered = set(sent["groups"])
    for p in procs:
        if p.pgid in covered or p.pid in never or not _still_ours(p, conf, node, proc):
            continue
        if _kill(p.pid, sig, group=False):
            sent["pids"].append(p.pid)
    return sent


def _kill(target: int, sig: int, group: bool) -> bool:
    try:
        if group:
            os.killpg(target, sig)
        else:
            os.kill(target, sig)
    except (ProcessLookupError, PermissionError):
        return False  # exited meanwhile (or not ours to signal): nothing was sent
    return True
