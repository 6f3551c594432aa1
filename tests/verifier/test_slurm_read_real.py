"""The verifier's own read of a Slurm node (verifier/scheduler_read.py SlurmReader), against the real
one-node cluster: what sinfo and squeue say, never what the executor says."""
from __future__ import annotations

import pytest

from common.config import build
from tests.rigs.slurm_fixture import slurm_rig  # noqa: F401 -- the module's one rig (a fixture)
from tests.rigs.slurm_rig import SlurmRig
from verifier.scheduler_read import ReadError, SlurmReader


def reader(rig: SlurmRig, node: str = "") -> SlurmReader:
    return SlurmReader(build({"node": {"name": node or rig.node_name, "scheduler": "slurm"},
                              "slurm": {"conf": rig.conf_path, "command_timeout_s": 10.0}}))


def test_a_running_job_and_then_a_drained_empty_node(slurm_rig):  # noqa: F811 -- the fixture
    rig = slurm_rig
    job = rig.sbatch("#!/bin/sh\nsleep 300\n")
    rig.wait_job_state(job, "RUNNING", timeout=90)   # the rig's default scheduling timers
    assert reader(rig).read() == (False, (str(job),))
    rig.run("scontrol", "update", f"nodename={rig.node_name}", "state=DRAIN", "reason=verifier-test")
    rig.run("scancel", str(job))
    rig.wait_for(lambda: reader(rig).read() == (True, ()), timeout=30)
    rig.run("scontrol", "update", f"nodename={rig.node_name}", "state=RESUME")


def test_a_node_slurm_does_not_know_cannot_be_read(slurm_rig):  # noqa: F811
    rig = slurm_rig
    with pytest.raises(ReadError, match="does not list node"):
        reader(rig, node="no-such-node").read()


def test_a_controller_that_does_not_answer_cannot_be_read(slurm_rig):  # noqa: F811
    rig = slurm_rig
    rig.stop_controller()
    try:
        with pytest.raises(ReadError):
            reader(rig).read()
    finally:
        rig.start_controller()
