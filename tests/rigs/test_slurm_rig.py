"""The Slurm rig behaves like the real cluster the executor will meet (one rig per module).

Each test states one behaviour the agent relies on (see shared/research/slurm.md)
and leaves the shared rig idle with no jobs (the autouse ``clean_rig`` fixture checks).
"""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rigs.slurm import procs
from tests.rigs.slurm_fixture import start_rig
from tests.rigs.slurm_rig import RigError, SlurmRig

# A job that saves a checkpoint on USR1 and exits. bash runs a trap only after its
# foreground command returns, hence `sleep & wait`.
CHECKPOINT_JOB = """#!/bin/bash
trap 'echo saved > "{ckpt}"; kill $child; exit 0' USR1
echo $$ > "{started}.tmp" && mv "{started}.tmp" "{started}"
sleep 300 & child=$!
wait $child
"""

# A job that records each run's restart count, then sleeps until signalled.
RESTART_JOB = """#!/bin/bash
echo "${{SLURM_RESTART_COUNT:-0}}" >> "{runs}"
sleep 300 & wait $!
"""


@pytest.fixture(autouse=True)
def clean_rig(slurm_rig: SlurmRig) -> None:
    """Every test starts on an idle node with no jobs, whatever the previous one left."""
    if not slurm_rig.controller_up():
        slurm_rig.start_controller()
    slurm_rig.reset()


def start_checkpoint_job(rig: SlurmRig, tmp_path: Path) -> tuple[int, Path, Path]:
    """Submit CHECKPOINT_JOB and wait until its trap is armed; returns (job id, started, ckpt)."""
    started, ckpt = tmp_path / "started", tmp_path / "ckpt"
    job = rig.sbatch(CHECKPOINT_JOB.format(started=started, ckpt=ckpt))
    rig.wait_for(started.exists, what=f"job {job} started")
    assert rig.job_state(job) == "RUNNING"
    return job, started, ckpt


def test_node_is_idle_after_start_and_named_like_the_host(slurm_rig: SlurmRig) -> None:
    """The rig's node registers as `hostname -s` and is idle, with the controller answering."""
    assert slurm_rig.node_name == socket.gethostname().split(".")[0]
    assert slurm_rig.node_state() == "idle"
    assert slurm_rig.controller_up()
    assert slurm_rig.env["SLURM_CONF"] == slurm_rig.conf_path


def test_usr1_to_batch_shell_makes_job_checkpoint_and_exit(slurm_rig: SlurmRig, tmp_path: Path) -> None:
    """`scancel --signal=USR1 --batch J` reaches the batch shell's trap; the job saves and ends."""
    job, _, ckpt = start_checkpoint_job(slurm_rig, tmp_path)
    assert not ckpt.exists()
    slurm_rig.run("scancel", "--signal=USR1", "--batch", str(job))
    slurm_rig.wait_for(ckpt.exists, what="checkpoint file written")
    assert ckpt.read_text().strip() == "saved"
    assert slurm_rig.wait_job_state(job, "COMPLETED") == "COMPLETED"


def test_drain_with_a_running_job_then_resume(slurm_rig: SlurmRig, tmp_path: Path) -> None:
    """DRAIN shows `draining` while a job runs, `drained` once it ends; RESUME makes it idle."""
    job, _, _ = start_checkpoint_job(slurm_rig, tmp_path)
    node = f"nodename={slurm_rig.node_name}"
    slurm_rig.run("scontrol", "update", node, "state=DRAIN", "reason=sco-agent rig test")
    assert slurm_rig.node_state() == "draining"
    assert slurm_rig.node_info()["Reason"].startswith("sco-agent rig test")
    slurm_rig.run("scancel", "--signal=USR1", "--batch", str(job))
    slurm_rig.wait_node_state("drained", timeout=20)
    assert slurm_rig.jobs("R,CG,S") == []
    slurm_rig.run("scontrol", "update", node, "state=RESUME")
    slurm_rig.wait_node_state("idle")
    # RESUME of a node that is not drained is refused: callers must read state first.
    again = slurm_rig.run("scontrol", "update", node, "state=RESUME", check=False)
    assert again.returncode == 1


def test_requeue_runs_the_job_again_with_restart_count(slurm_rig: SlurmRig, tmp_path: Path) -> None:
    """`scontrol requeue J` ends the run and queues it again; the next run sees SLURM_RESTART_COUNT=1."""
    runs = tmp_path / "runs"
    job = slurm_rig.sbatch(RESTART_JOB.format(runs=runs), requeue=True)
    slurm_rig.wait_for(lambda: runs.exists() and runs.read_text().splitlines() == ["0"], what="first run")
    slurm_rig.run("scontrol", "requeue", str(job))
    # A requeued job waits ~120 s (BeginTime); StartTime=now lets it run again at once.
    slurm_rig.wait_job_state(job, "PENDING", timeout=30)
    slurm_rig.run("scontrol", "update", f"jobid={job}", "StartTime=now")
    slurm_rig.wait_for(lambda: runs.read_text().splitlines() == ["0", "1"], timeout=30, what="second run")
    assert slurm_rig.job_info(job)["Restarts"] == "1"


def test_jobs_survive_the_controller_going_away(slurm_rig: SlurmRig, tmp_path: Path) -> None:
    """With slurmctld down ping fails, listpids still finds the job; a restart recovers it running."""
    job, started, _ = start_checkpoint_job(slurm_rig, tmp_path)
    batch_shell = int(started.read_text())
    slurm_rig.stop_controller()
    # Fails, rather than waiting out MessageTimeout (the timeout here would raise instead).
    ping = slurm_rig.run("scontrol", "ping", timeout=5, check=False)
    assert ping.returncode != 0
    assert batch_shell in slurm_rig.job_pids(job)
    assert procs.environ(batch_shell).get("SLURM_JOB_ID") == str(job)
    slurm_rig.start_controller()
    assert slurm_rig.wait_job_state(job, "RUNNING") == "RUNNING"
    assert batch_shell in slurm_rig.job_pids(job)


def test_jobs_survive_slurmd_going_away(slurm_rig: SlurmRig, tmp_path: Path) -> None:
    """Stopping slurmd signals no job; a restarted slurmd picks the running job up again."""
    job, started, ckpt = start_checkpoint_job(slurm_rig, tmp_path)
    batch_shell = procs.identify(int(started.read_text()))
    assert batch_shell is not None
    slurm_rig.stop_slurmd()
    assert "slurmd" not in slurm_rig.daemons
    assert procs.is_alive(batch_shell)
    assert batch_shell.pid in slurm_rig.job_pids(job)
    slurm_rig.start_slurmd()
    slurm_rig.run("scancel", "--signal=USR1", "--batch", str(job))
    slurm_rig.wait_for(ckpt.exists, what="checkpoint after slurmd restart")
    assert slurm_rig.wait_job_state(job, "COMPLETED") == "COMPLETED"


def test_run_raises_on_a_refused_call(slurm_rig: SlurmRig) -> None:
    """DRAIN without a reason is refused (rc 1) and ``run`` turns that into RigError."""
    with pytest.raises(RigError, match="rc 1"):
        slurm_rig.run("scontrol", "update", f"nodename={slurm_rig.node_name}", "state=DRAIN")
    assert slurm_rig.node_state() == "idle"


def test_stop_leaves_no_process_of_the_rig_alive(slurm_rig: SlurmRig, tmp_path: Path) -> None:
    """A second rig (own ports) runs beside the first; its stop() ends its daemons and jobs only."""
    rig = start_rig(tmp_path / "rig2")
    try:
        assert rig.ports.keys() == slurm_rig.ports.keys()
        assert set(rig.ports.values()).isdisjoint(slurm_rig.ports.values())
        started = tmp_path / "started"
        job = rig.sbatch(CHECKPOINT_JOB.format(started=started, ckpt=tmp_path / "ckpt"))
        rig.wait_for(started.exists, what=f"job {job} started")
        watched = [*rig.daemons.values(), *filter(None, map(procs.identify, rig.job_pids(job)))]
        assert {p.comm for p in watched} >= {"munged", "slurmctld", "slurmd", "slurm_script", "sleep"}
        # A frozen (hung) controller must not stop the rig from stopping.
        assert rig.signal_daemon("slurmctld", signal.SIGSTOP)
    finally:
        rig.stop()
    assert [p for p in watched if procs.is_alive(p)] == []
    assert rig.daemons == {}
    # The shared rig was not disturbed.
    assert slurm_rig.controller_up()
    assert slurm_rig.node_state() == "idle"


def test_cli_start_prints_the_environment_and_stop_ends_the_rig(tmp_path: Path) -> None:
    """`start DIR` leaves a running rig recorded in DIR/rig.json; `stop DIR` ends its daemons."""
    cli = [sys.executable, "-m", "tests.rigs.slurm_rig"]
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([*cli, "start", str(tmp_path)], cwd=root, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    rig = SlurmRig.load(tmp_path)
    try:
        assert f"export SLURM_CONF={rig.conf_path}\n" in out
        assert set(rig.daemons) == {"munged", "slurmctld", "slurmd"}
        assert all(procs.is_alive(p) for p in rig.daemons.values())
        assert rig.node_state() == "idle"
    finally:
        subprocess.run([*cli, "stop", str(tmp_path)], cwd=root, timeout=60, check=True)
    assert not any(procs.is_alive(p) for p in rig.daemons.values())
    assert SlurmRig.load(tmp_path).daemons == {}
