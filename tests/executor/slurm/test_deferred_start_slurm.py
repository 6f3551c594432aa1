"""Issue 28, point 2, on Slurm: the executor process against the real one-node cluster.

Slurm's cordon is DRAIN: no new job lands, the running ones run on. A deferred maintenance (the
built-in contract's start, ``deadline - budget_s``) DRAINs the node at once and leaves its job
running, unsignalled -- across an executor SIGKILLed and started again while it waits -- until its
start; then the job is signalled and requeued and the node is empty. A cordon-only maintenance
DRAINs and never touches the job; withdrawn, the node is RESUMEd.
"""
from __future__ import annotations

import time

import pytest

from tests.executor.slurm.harness import start_job
from tests.executor.slurm.process import ExecutorHarness
from tests.executor.slurm.test_executor_process import COUNTING_JOB, DRAIN, SLURM
from tests.support.wait import wait_for

START_IN_S = 10.0   # the maintenance's drain starts this long after it is announced


def drain_set(rig) -> bool:
    return "DRAIN" in rig.node_info().get("State", "")


@pytest.mark.parametrize("restart", [False, True])
def test_a_deferred_maintenance_drains_the_node_at_once_and_moves_its_job_only_from_its_start(rig, tmp_path, restart):
    """Without a restart, the scheduler that ran the cordon-only order runs the same notice's drain."""
    job, _ = start_job(rig, COUNTING_JOB, tmp_path, requeue=True)
    with ExecutorHarness(rig, DRAIN, SLURM) as h:
        h.start()
        maint = h.announce(deadline_in=DRAIN["budget_s"] + START_IN_S, kind="maintenance")
        starts_at = time.time() - 0.5 + START_IN_S   # announce's notice was issued a moment before
        h.wait_event("drain.cordoned", maint["id"], timeout=15)
        wait_for(lambda: h.record(maint["id"]).get("state") == "waiting", 10, "the drain waiting for its start")
        assert drain_set(rig) and rig.job_state(job) == "RUNNING"
        if restart:   # restarted between the cordon and the start: neither early nor forgotten
            h.kill_executor()
            h.start()
        while time.time() < starts_at - 0.5:
            assert h.events_of("drain.signalled", maint["id"]) == [] and not (tmp_path / "ckpt").exists()
            assert rig.job_state(job) == "RUNNING" and drain_set(rig)
            time.sleep(0.2)
        started = h.wait_event("drain.deferred_started", maint["id"], timeout=10)
        h.wait_event("drain.signalled", maint["id"], timeout=10)
        wait_for((tmp_path / "ckpt").exists, 10, "USR1 received by the job")
        wait_for(lambda: h.record(maint["id"]).get("state") == "done", 60, "the maintenance done")
    assert started["data"]["waited"] is True and started["data"]["late_ms"] >= 0
    assert len(h.events_of("drain.deferred_started", maint["id"])) == 1
    assert (tmp_path / "ckpt").read_text().splitlines() == ["usr1"]
    assert rig.node_state() == "drained" and rig.job_state(job) == "PENDING"


def test_a_cordon_only_maintenance_drains_the_node_and_never_touches_its_job(rig, tmp_path):
    job, _ = start_job(rig, COUNTING_JOB, tmp_path, requeue=True)
    with ExecutorHarness(rig, DRAIN, SLURM, contract_extra={"kinds": {"maintenance": "cordon"}}) as h:
        h.start()
        maint = h.announce(deadline_in=60, kind="maintenance")
        wait_for(lambda: h.record(maint["id"]).get("state") == "cordoned_only", 15, "the node DRAINed, cordon only")
        assert drain_set(rig)
        time.sleep(3.0)
        assert h.events_of("drain.signalled", maint["id"]) == [] and not (tmp_path / "ckpt").exists()
        assert h.events_of("drain.deferred_started", maint["id"]) == []
        assert rig.job_state(job) == "RUNNING" and drain_set(rig)
        h.withdraw(maint["id"])
        undone = h.wait_event("drain.uncordoned", maint["id"])
    assert undone["data"]["action"] == "resume"
    assert rig.job_state(job) == "RUNNING"
