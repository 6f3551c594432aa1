"""Issue 26, points 1 and 2, on Slurm: the executor process against the real one-node cluster.

A maintenance drain signals the job; a reclaim arrives and takes the drain over: the agent's DRAIN
reason is renamed for it, the job is not signalled a second time (the drain's memory went with it),
both notices end with the node empty. Cancelling the reclaim then keeps the node drained for the
maintenance (sampled every 100 ms); cancelling the maintenance too RESUMEs it.
"""
from __future__ import annotations

import threading

from tests.executor.slurm.harness import start_job
from tests.executor.slurm.process import ExecutorHarness
from tests.executor.slurm.test_executor_process import COUNTING_JOB, DRAIN, SLURM
from tests.support.wait import wait_for


def test_a_reclaim_takes_over_the_slurm_drain_and_a_cancel_keeps_the_node_drained(rig, tmp_path):
    job, _ = start_job(rig, COUNTING_JOB, tmp_path, requeue=True)
    # The maintenance drains at once here (the built-in start defers it: test_deferred_start_slurm.py).
    with ExecutorHarness(rig, DRAIN, SLURM, contract_extra={"start": {"maintenance": "at_once"}}) as h:
        h.start()
        maint = h.announce(deadline_in=600, kind="maintenance")
        h.wait_event("drain.signalled", maint["id"])
        wait_for((tmp_path / "ckpt").exists, 10, "USR1 received by the job")
        reclaim = h.announce(deadline_in=60, kind="reclaim", also=True)
        wait_for(lambda: rig.node_info().get("Reason", "").startswith(f"sco-agent notice {reclaim['id']} "), 15,
                 "the DRAIN reason naming the reclaim")
        for n in (maint, reclaim):
            wait_for(lambda n=n: h.record(n["id"]).get("state") == "done", 60, f"{n['kind']} done")
        assert (tmp_path / "ckpt").read_text().splitlines() == ["usr1"]   # signalled once, not per notice
        assert h.record(reclaim["id"])["remaining"] == [] and h.record(maint["id"])["remaining"] == []
        assert rig.node_state() == "drained" and rig.job_state(job) == "PENDING"

        states: list[str] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                states.append(rig.node_state())
                stop.wait(0.1)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            h.withdraw(reclaim["id"])
            kept = h.wait_event("drain.uncordoned", reclaim["id"])
            wait_for(lambda: h.record(reclaim["id"]).get("state") == "withdrawn", 10, "the reclaim withdrawn")
        finally:
            stop.set()
            sampler.join(5)
        assert kept["data"]["action"] == "kept_for_other_notice"
        assert states and set(states) == {"drained"}, states
        h.withdraw(maint["id"])
        undone = h.wait_event("drain.uncordoned", maint["id"])
    assert undone["data"]["action"] == "resume"
