"""The Slurm drain around slurmctld: stopped or hung, the jobs are signalled directly, then reconciled.

Stopping slurmd is not how jobs are stopped (they keep running without it), so the
recipe finds the job's processes itself (``scontrol listpids`` and a /proc scan) and
signals them at the contract's cutoffs; when the controller answers again it sets
the DRAIN, re-reads the state and records ``drain.reconciled``.
"""
from __future__ import annotations

import signal

from tests.executor.slurm.harness import CHECKPOINT_JOB, STUBBORN_JOB, Driver, nodes_named, notice, record, start_job
from tests.rigs.slurm import procs
from tests.support.wait import wait_for


def test_controller_stopped_before_the_notice(rig, tmp_path):
    """The batch shell gets USR1 directly and checkpoints; the controller comes back: DRAIN, reconciled, done."""
    job, started = start_job(rig, CHECKPOINT_JOB, tmp_path)
    shell = int(started.read_text())
    rig.stop_controller()
    n = notice(rig)
    d = Driver(rig, n, record(n, checkpoint_s=30, evict_s=30))
    d.until((tmp_path / "ckpt").exists, 15, "checkpoint written after a direct USR1")
    fallback = d.out.of("drain.fallback")[0]
    assert fallback["phase"] == "checkpoint" and fallback["jobs_found"] == [job]
    assert fallback["signalled"] == {str(job): {"signal": "SIGUSR1", "scope": "batch", "groups": [], "pids": [shell]}}
    assert "slurmctld" in fallback["reason"]
    assert "cordoned" not in d.rec["steps"] and d.rec["state"] == "running"
    assert d.rec["remaining"]  # never empty while the controller cannot confirm it

    rig.start_controller()
    d.until(d.done, 30, "reconciled and empty")
    assert d.out.types().index("drain.reconciled") < d.out.types().index("drain.node_empty")
    assert d.out.of("drain.reconciled")[0]["drain_set"] is True
    assert "drain.signalled" not in d.out.types()  # USR1 was sent once, directly
    assert rig.node_state() == "drained"
    assert rig.node_info()["Reason"].startswith(f"sco-agent notice {n.id} ")
    assert nodes_named(d.all_commands()) == {rig.node_name}


def test_with_the_controller_down_a_stubborn_job_gets_term_then_kill_at_the_cutoffs(rig, tmp_path):
    """Checkpoint signal, TERM at the checkpoint cutoff, KILL at the evict cutoff: each once, to the job's group."""
    job, started = start_job(rig, STUBBORN_JOB, tmp_path)
    shell = procs.identify(int(started.read_text()))
    rig.stop_controller()
    n = notice(rig)
    d = Driver(rig, n, record(n, checkpoint_s=1, evict_s=1))
    d.until(lambda: not procs.is_alive(shell), 15, "the job's batch shell killed")
    phases = [(e["phase"], e["signalled"].get(str(job), {}).get("signal")) for e in d.out.of("drain.fallback")]
    assert phases == [("checkpoint", "SIGUSR1"), ("evict", "SIGTERM"), ("kill", "SIGKILL")]
    term = d.out.of("drain.fallback")[1]["signalled"][str(job)]
    assert term["groups"] == [shell.pid] and term["scope"] == "full"
    # The KILL went to the job's whole group; the shell's death is seen first, and slurmstepd
    # drops the rest from ``listpids`` once the kernel has reaped them -- a moment later under load
    # (one fresh-clone run saw a child still listed). A job the KILL missed stays listed for good.
    wait_for(lambda: rig.job_pids(job) == [], 10, lambda: f"every process of the job gone (listed: {rig.job_pids(job)})")
    rig.start_controller()
    d.until(d.done, 30, "reconciled and empty")
    assert rig.node_state() == "drained"


def test_hung_controller_is_gone_around_then_reconciled(rig, tmp_path):
    """A frozen slurmctld: ping times out, the job is signalled directly; thawed, the drain completes."""
    job, _ = start_job(rig, CHECKPOINT_JOB, tmp_path)
    assert rig.signal_daemon("slurmctld", signal.SIGSTOP)
    n = notice(rig)
    d = Driver(rig, n, record(n, checkpoint_s=30, evict_s=30))
    try:
        d.until((tmp_path / "ckpt").exists, 20, "checkpoint written after a direct USR1")
        assert d.out.of("drain.fallback")[0]["signalled"][str(job)]["signal"] == "SIGUSR1"
    finally:
        rig.signal_daemon("slurmctld", signal.SIGCONT)
    d.until(d.done, 30, "reconciled and empty")
    assert "drain.reconciled" in d.out.types()
    assert rig.node_state() == "drained"
    assert rig.job_state(job) == "COMPLETED"
