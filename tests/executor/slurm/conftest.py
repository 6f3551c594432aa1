"""Fixtures for the Slurm drain tests: the real one-node cluster (one rig per test module)."""
from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.rigs.slurm_fixture import start_rig
from tests.rigs.slurm_rig import SlurmRig

# Schedule every second rather than on Slurm's 30-60 s timers: a job submitted, or requeued and
# released with StartTime=now, then starts in about a second instead of up to half a minute.
FAST_SCHEDULING = {"SchedulerParameters": "sched_interval=1,bf_interval=1"}


@pytest.fixture(scope="module")
def slurm_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmRig]:
    """One running rig shared by the tests of a module; stopped (every PID checked) at the end."""
    rig = start_rig(tmp_path_factory.mktemp("slurm-drain"), FAST_SCHEDULING)
    try:
        yield rig
    finally:
        rig.stop()


@pytest.fixture
def rig(slurm_rig: SlurmRig) -> SlurmRig:
    """The module's rig, back to an idle node with no jobs and a live controller before each test."""
    slurm_rig.signal_daemon("slurmctld", signal.SIGCONT)  # a test may have frozen it
    if "slurmctld" not in slurm_rig.daemons or not slurm_rig.controller_up():
        slurm_rig.stop_controller()
        slurm_rig.start_controller()
    running = slurm_rig.jobs("R")
    if running:
        # Test jobs have nothing to save: KILL rather than wait out KillWait for ones ignoring TERM.
        slurm_rig.run("scancel", "--signal=KILL", "--full", *map(str, running), check=False)
    slurm_rig.reset()
    return slurm_rig
