"""Finding and signalling a job's processes without Slurm, on real processes with a job's environment.

No cluster is needed: a process carrying SLURM_JOB_ID / SLURM_CONF / SLURMD_NODENAME
looks to the /proc scan exactly like a job's. Each test starts its own processes and
kills what is left by PID.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from executor.slurm import local as slurm_local
from executor.slurm.cli import PidRow
from tests.support.procutil import pid_alive
from tests.support.wait import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# Unique to this test process: the /proc scan sees every process on the machine, and the CI runs its
# Python tiers side by side -- with one shared path, two runs of a test found each other's jobs.
CONF = f"/nonexistent/sco-test-{os.getpid()}/slurm.conf"
NODE = "n1"
# The batch shell: a process-group leader whose children share its group.
SHELL = "sleep 60 & sleep 60 & wait"


@pytest.fixture
def spawn() -> Iterator:
    started: list[subprocess.Popen] = []

    def start(job: int, conf: str = CONF, node: str = NODE, script: str = SHELL,
              extra: dict[str, str] | None = None) -> subprocess.Popen:
        env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": str(job), "SLURM_CONF": conf,
               "SLURMD_NODENAME": node, **(extra or {})}
        p = subprocess.Popen(["bash", "-c", script], env=env, start_new_session=True)
        started.append(p)
        wait_for(lambda: len(children(p.pid)) == script.count("&"), 5, "the shell's children")
        return p

    yield start
    for p in started:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=5)


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def test_scan_finds_this_clusters_job_processes_only(spawn):
    """Same job id on another cluster (another SLURM_CONF) or another node name: not ours."""
    mine = spawn(4242)
    other_cluster = spawn(4242, conf="/elsewhere/slurm.conf")
    other_node = spawn(4242, node="n2")
    found = slurm_local.scan(CONF, NODE)
    assert {pid for pid, job in found.items() if job == 4242} == {mine.pid, *children(mine.pid)}
    assert other_cluster.pid not in found and other_node.pid not in found


def test_full_scope_signals_the_jobs_process_group(spawn):
    """The group leader without SLURM_STEP_ID is the batch shell; killpg reaches it and its children."""
    p = spawn(7)
    kids = children(p.pid)
    procs = slurm_local.find([], slurm_local.scan(CONF, NODE), CONF, NODE)[7]
    assert {q.pid for q in procs if q.batch_shell} == {p.pid}
    assert {q.pgid for q in procs} == {p.pid}
    sent = slurm_local.signal_job(procs, signal.SIGTERM, "full", CONF, NODE)
    assert sent == {"groups": [p.pid], "pids": []}
    assert p.wait(timeout=5) != 0
    wait_for(lambda: not any(pid_alive(k) for k in kids), 5, "children gone with the group")


def test_batch_scope_signals_the_batch_shell_alone(spawn):
    """Like scancel --batch: the shell's trap runs, its children are left to the shell."""
    p = spawn(8, script="trap 'exit 3' USR1; sleep 60 & wait")
    kids = children(p.pid)
    procs = slurm_local.find([], slurm_local.scan(CONF, NODE), CONF, NODE)[8]
    sent = slurm_local.signal_job(procs, signal.SIGUSR1, "batch", CONF, NODE)
    assert sent == {"groups": [], "pids": [p.pid]}
    assert p.wait(timeout=5) == 3
    assert all(pid_alive(k) for k in kids)


def test_a_listed_pid_without_the_jobs_environment_is_never_signalled(spawn):
    """listpids can name PID 1, kernel threads or a reused PID: the environment check refuses them."""
    me = os.getpid()
    rows = [PidRow(1, 9, "batch", "0"), PidRow(2, 9, "batch", "-"), PidRow(me, 9, "batch", "0")]
    assert slurm_local.find(rows, {}, CONF, NODE) == {}


def test_a_listed_process_needs_the_job_id_but_not_our_slurm_conf(spawn):
    """slurmstepd's own list is ours whatever SLURM_CONF the job carries (configless slurmd)."""
    p = spawn(10, conf="/run/slurm/conf/slurm.conf")
    kid = children(p.pid)[0]
    rows = [PidRow(p.pid, 10, "batch", "0"), PidRow(kid, 11, "batch", "-")]  # kid is job 10's, not 11's
    found = slurm_local.find(rows, {}, CONF, NODE)
    assert list(found) == [10]
    assert [(q.pid, q.batch_shell, q.listed) for q in found[10]] == [(p.pid, True, True)]


def test_a_pid_reused_after_it_was_found_is_not_signalled(spawn):
    """Checked again right before the signal: a process whose job changed is left alone."""
    p = spawn(12)
    procs = slurm_local.find([], slurm_local.scan(CONF, NODE), CONF, NODE)[12]
    stale = [slurm_local.JobProc(q.pid, 13, q.pgid, q.batch_shell, q.listed) for q in procs]
    assert slurm_local.signal_job(stale, signal.SIGKILL, "full", CONF, NODE) == {"groups": [], "pids": []}
    assert p.poll() is None


def test_own_process_group_is_never_signalled():
    """An agent that itself carries a job's environment (started from a job) never signals its own group."""
    # The scan skips the agent's own PID, but listpids would list it if the agent ran inside a job.
    code = ("import os, signal; from executor.slurm import local as L; from executor.slurm.cli import PidRow; "
            f"procs = L.find([PidRow(os.getpid(), 15, 'batch', '0')], {{}}, {CONF!r}, {NODE!r})[15]; "
            "assert [p.pid for p in procs if p.batch_shell] == [os.getpgrp()], procs; "
            f"print(L.signal_job(procs, signal.SIGKILL, 'full', {CONF!r}, {NODE!r}))")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": REPO, "SLURM_JOB_ID": "15", "SLURM_CONF": CONF,
           "SLURMD_NODENAME": NODE}
    res = subprocess.run([sys.executable, "-c", code], env=env, start_new_session=True, capture_output=True,
                         text=True, timeout=30, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "{'groups': [], 'pids': []}"
