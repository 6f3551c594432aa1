"""The Slurm drain on a real one-node cluster, with slurmctld answering.

The recipe (executor.slurm.recipe) is driven in-process as the executor loop drives it,
reporting to a Recorder; every test ends with the rig idle again (the ``rig`` fixture
resets it) and checks that no command named a node other than the rig's own.
"""
from __future__ import annotations

import time

import pytest

from common.contract import SlurmPolicy
from tests.slurm.harness import (
    CHECKPOINT_JOB,
    RESUMABLE_JOB,
    STUBBORN_JOB,
    Driver,
    nodes_named,
    notice,
    record,
    start_job,
)


@pytest.fixture
def own_node_only(rig):
    """After the test: every Slurm command of every Driver addressed the rig's node and no other."""
    drivers: list[Driver] = []
    yield drivers.append
    for d in drivers:
        assert nodes_named(d.all_commands()) <= {rig.node_name}
        assert nodes_named(d.all_commands())  # it did address the node


def test_checkpointing_job_exits_and_the_node_drains(rig, tmp_path, own_node_only):
    """USR1 to the batch shell: the job saves and exits; DRAIN set with the notice's reason; done."""
    job, _ = start_job(rig, CHECKPOINT_JOB, tmp_path)
    n = notice(rig)
    d = Driver(rig, n, record(n, checkpoint_s=30, evict_s=30))
    own_node_only(d)
    d.until(d.done, 30, "node empty")
    assert (tmp_path / "ckpt").read_text().strip() == "saved"
    assert rig.node_state() == "drained"
    assert rig.node_info()["Reason"].startswith(f"sco-agent notice {n.id} reclaim deadline ")
    assert rig.job_state(job) == "COMPLETED"
    assert d.out.of("drain.signalled") == [{"jobs": [job], "failed": {}, "signal": "SIGUSR1", "scope": "batch",
                                            "via": "scancel"}]
    assert d.out.of("drain.cordoned")[0]["agent_drain"] is True
    assert "drain.requeued" not in d.out.types()
    assert d.out.types()[-1] == "drain.node_empty"
    assert d.rec["remaining"] == [] and {"cordoned", "signalled", "node_empty"} <= d.rec["steps"].keys()


def test_job_ignoring_signals_is_requeued_at_the_cutoff_then_killed(rig, tmp_path, own_node_only):
    """Nothing moves it before the checkpoint cutoff; requeue then; SIGKILL at the evict cutoff."""
    job, _ = start_job(rig, STUBBORN_JOB, tmp_path, requeue=True)
    n = notice(rig)
    d = Driver(rig, n, record(n, checkpoint_s=2, evict_s=2))
    own_node_only(d)
    d.until(lambda: "signalled" in d.rec["steps"], 10, "checkpoint signal")
    assert rig.job_state(job) == "RUNNING" and d.rec["remaining"] == [str(job)]
    d.until(d.done, 30, "node empty")
    steps = d.rec["steps"]
    assert steps["requeued"] >= n.received_at + 2
    assert d.out.of("drain.requeued") == [{"jobs": [job], "already_gone": [], "via": "scontrol requeue"}]
    killed = [e for e in d.out.of("drain.signalled") if e["via"] == "local"]
    assert killed and killed[0]["signal"] == "SIGKILL" and killed[0]["jobs"] == [job]
    assert rig.node_state() == "drained"
    assert rig.job_state(job) == "PENDING"  # requeued, held back by BeginTime


def test_requeued_job_runs_again_and_resumes_from_its_checkpoint(rig, tmp_path, own_node_only):
    """Checkpoint on USR1, requeued at the cutoff; the next run sees SLURM_RESTART_COUNT=1 and the checkpoint."""
    job, _ = start_job(rig, RESUMABLE_JOB, tmp_path, requeue=True)
    n = notice(rig)
    d = Driver(rig, n, record(n, checkpoint_s=2, evict_s=20))
    own_node_only(d)
    d.until(d.done, 30, "node empty")
    assert (tmp_path / "ckpt").read_text().strip() == "step-42"
    # The spot instance survived after all: let the job run here again at once.
    rig.run("scontrol", "update", f"nodename={rig.node_name}", "state=RESUME")
    rig.wait_job_state(job, "PENDING")
    rig.run("scontrol", "update", f"jobid={job}", "StartTime=now")
    runs = tmp_path / "runs"
    rig.wait_for(lambda: len(runs.read_text().splitlines()) == 2, timeout=30, what="second run")
    assert runs.read_text().splitlines() == ["0 none", "1 step-42"]


def test_a_job_that_cannot_be_requeued_is_left_and_reported(rig, tmp_path, own_node_only):
    """on_drain=requeue and the job says --no-requeue: reported, never cancelled or killed."""
    job, _ = start_job(rig, STUBBORN_JOB, tmp_path, no_requeue=True)
    n = notice(rig)
    d = Driver(rig, n, record(n, checkpoint_s=1, evict_s=1))
    own_node_only(d)
    d.until(lambda: d.out.of("drain.error"), 15, "requeue refused")
    err = d.out.of("drain.error")[0]
    assert list(err["jobs"]) == [str(job)] and "presently disabled" in err["jobs"][str(job)]
    # Well past the evict cutoff: still running, still what keeps the node from done.
    until = time.monotonic() + 2.5
    while time.monotonic() < until:
        d.step()
        time.sleep(0.1)
    assert rig.job_state(job) == "RUNNING"
    assert d.rec["remaining"] == [str(job)] and d.rec["state"] == "running"
    assert "drain.requeued" not in d.out.types() and "drain.deleted" not in d.out.types()
    assert len(d.out.of("drain.error")) == 1  # reported once, not every round


def test_cancel_policy_cancels_at_the_verifiers_escalation(rig, tmp_path, own_node_only):
    """on_drain=cancel: scancel; the verifier's checkpoint_over moves the drain on before our own cutoff."""
    job, _ = start_job(rig, CHECKPOINT_JOB.replace("USR1", "USR2"), tmp_path, no_requeue=True)
    n = notice(rig)
    levels = {n.id: None}
    d = Driver(rig, n, record(n, checkpoint_s=60, evict_s=60),
               policy=SlurmPolicy(signal="SIGUSR1", signal_scope="batch", on_drain="cancel"),
               levels=levels.get)
    own_node_only(d)
    d.until(lambda: "signalled" in d.rec["steps"], 10, "checkpoint signal")
    levels[n.id] = "checkpoint_over"
    d.until(d.done, 30, "node empty")
    assert d.out.of("drain.deleted") == [{"jobs": [job], "already_gone": [], "via": "scancel"}]
    assert rig.job_state(job) == "CANCELLED"
    assert not (tmp_path / "ckpt").exists()


def test_withdrawn_notice_resumes_the_agents_drain_but_never_an_operators(rig, own_node_only):
    """RESUME after a withdrawal only when the DRAIN reason is the agent's own."""
    n = notice(rig)
    d = Driver(rig, n, record(n, checkpoint_s=5, evict_s=5))
    own_node_only(d)
    d.until(d.done, 15, "empty node drained")
    d.withdraw()
    assert d.out.of("drain.uncordoned")[-1]["action"] == "resume"
    rig.wait_node_state("idle")

    rig.run("scontrol", "update", f"nodename={rig.node_name}", "state=DRAIN", "reason=ops: disk swap")
    n2 = notice(rig)
    d2 = Driver(rig, n2, record(n2, checkpoint_s=5, evict_s=5))
    own_node_only(d2)
    d2.until(d2.done, 15, "node already drained by an operator")
    assert d2.out.of("drain.cordoned")[0]["agent_drain"] is False
    d2.withdraw()
    assert d2.out.of("drain.uncordoned")[-1]["action"] == "kept_operator_drain"
    assert rig.node_state() == "drained" and rig.node_info()["Reason"].startswith("ops: disk swap")
