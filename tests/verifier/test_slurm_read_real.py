"""The verifier's own read of a Slurm node (verifier/scheduler_read.py SlurmReader), against the real
one-node cluster: what sinfo and squeue say, never what the executor says."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from common.config import build
from tests.rigs.slurm_fixture import start_rig
from tests.rigs.slurm_rig import SlurmRig
from verifier.scheduler_read import ReadError, SlurmReader

FAST_SCHEDULING = {"SchedulerParameters": "sched_interval=1,bf_interval=1"}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmRig]:
    r = start_rig(tmp_path_factory.mktemp("slurm-verifier"), FAST_SCHEDULING)
    try:
        yield r
    finally:
        r.stop()


def reader(rig: SlurmRig, node: str = "") -> SlurmReader:
    return SlurmReader(build({"node": {"name": node or rig.node_name, "scheduler": "slurm"},
                              "slurm": {"conf": rig.conf_path, "command_timeout_s": 10.0}}))


def test_a_running_job_and_then_a_drained_empty_node(rig):
    job = rig.sbatch("#!/bin/sh\nsleep 300\n")
    rig.wait_job_state(job, "RUNNING", timeout=30)
    assert reader(rig).read() == (False, (str(job),))
    rig.run("scontrol", "update", f"nodename={rig.node_name}", "state=DRAIN", "reason=verifier-test")
    rig.run("scancel", str(job))
    rig.wait_for(lambda: reader(rig).read() == (True, ()), timeout=30)
    rig.run("scontrol", "update", f"nodename={rig.node_name}", "state=RESUME")


def test_a_node_slurm_does_not_know_cannot_be_read(rig):
    with pytest.raises(ReadError, match="does not list node"):
        reader(rig, node="no-such-node").read()


def test_a_controller_that_does_not_answer_cannot_be_read(rig):
    rig.stop_controller()
    try:
        with pytest.raises(ReadError):
            reader(rig).read()
    finally:
        rig.start_controller()
