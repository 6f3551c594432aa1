"""The executor process itself on a Slurm node: SIGKILLed mid-drain, restarted, it completes the drain.

Runs ``python -m executor`` with ``node.scheduler = "slurm"`` against the real rig,
with the watcher, spool and verifier played by tests.executor.slurm.process.ExecutorHarness.
"""
from __future__ import annotations

import time

import ujson

from tests.executor.slurm.harness import nodes_named, start_job
from tests.executor.slurm.process import ExecutorHarness
from tests.support.wait import wait_for

# Counts every USR1 it receives and keeps running: only the requeue's TERM ends a run.
COUNTING_JOB = """#!/bin/bash
trap 'echo usr1 >> "{ckpt}"' USR1
echo $$ > "{started}.tmp" && mv "{started}.tmp" "{started}"
while true; do sleep 300 & wait $!; done
"""

DRAIN = {"budget_s": 40, "checkpoint_s": 5, "evict_s": 30, "margin_s": 5}
SLURM = {"signal": "SIGUSR1", "signal_scope": "batch", "on_drain": "requeue"}


def test_executor_sigkilled_mid_drain_finishes_it_without_repeating_anything(rig, tmp_path):
    """Killed after the checkpoint signal: the restarted executor requeues at the cutoff and reports done;
    the job got USR1 once, DRAIN was announced once, and no command named another node."""
    job, _ = start_job(rig, COUNTING_JOB, tmp_path, requeue=True)
    with ExecutorHarness(rig, DRAIN, SLURM) as h:
        first = h.start()
        n = h.announce()
        signalled = h.wait_event("drain.signalled", n["id"])
        wait_for((tmp_path / "ckpt").exists, 10, "USR1 received by the job")
        h.kill_executor()
        second = h.start()
        h.wait_event("drain.node_empty", n["id"], timeout=60)
        wait_for(lambda: h.record(n["id"]).get("state") == "done", 10, "progress says done")
        log = h.log_lines()

    assert (tmp_path / "ckpt").read_text().splitlines() == ["usr1"]
    assert signalled["data"]["jobs"] == [job] and f"-{first}-" in signalled["source"]
    requeued = h.events_of("drain.requeued", n["id"])
    assert len(requeued) == 1 and requeued[0]["data"]["jobs"] == [job]
    assert f"-{second}-" in requeued[0]["source"]
    assert len(h.events_of("drain.cordoned", n["id"])) == 1
    assert rig.node_state() == "drained" and rig.job_state(job) == "PENDING"
    assert h.record(n["id"])["remaining"] == []
    # The executor's own audit trail of every change it made to Slurm.
    commands = [tuple(ujson.loads(line)["argv"]) for line in log if '"slurm.command"' in line]
    assert ("scontrol", "requeue", str(job)) in commands
    assert nodes_named(commands) == {rig.node_name}


def test_executor_resumes_its_own_drain_when_the_notice_is_withdrawn(rig):
    """Cancel of the notice: the executor RESUMEs the node it drained, and says so."""
    with ExecutorHarness(rig, DRAIN, SLURM) as h:
        h.start()
        n = h.announce()
        h.wait_event("drain.node_empty", n["id"])
        assert rig.node_state() == "drained"
        h.withdraw(n["id"])
        undone = h.wait_event("drain.uncordoned", n["id"])
        wait_for(lambda: h.record(n["id"]).get("state") == "withdrawn", 10, "progress says withdrawn")
    assert undone["data"]["action"] == "resume"
    rig.wait_node_state("idle")


def test_withdrawal_waits_for_a_restarted_controller_to_hear_slurmd_before_resuming(rig):
    """Found by the chaos run: withdrawn right after a slurmctld restart, the node UNKNOWN+DRAIN; Slurm
    refuses that RESUME ("Invalid node state specified") yet clears the DRAIN, so the agent recorded
    drain.error and then action "not_drained". Now it waits until slurmd has reported in, then resumes."""
    with ExecutorHarness(rig, DRAIN, SLURM) as h:
        h.start()
        n = h.announce()
        h.wait_event("drain.node_empty", n["id"])
        rig.stop_slurmd()
        try:
            rig.stop_controller()
            rig.start_controller()   # slurmd is not there to report in: the node stays UNKNOWN+DRAIN
            assert "UNKNOWN" in rig.node_info()["State"] and "DRAIN" in rig.node_info()["State"]
            h.withdraw(n["id"])
            # A few undo rounds (one a second) while the node is UNKNOWN: nothing tried, nothing reported.
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                assert not h.events_of("drain.uncordoned", n["id"]) and not h.events_of("drain.error", n["id"])
                time.sleep(0.2)
        finally:
            rig.start_slurmd()
        undone = h.wait_event("drain.uncordoned", n["id"], timeout=60)
    assert undone["data"]["action"] == "resume"
    assert h.events_of("drain.error", n["id"]) == []
    rig.wait_node_state("idle")
