"""The Slurm CLI adapter without a cluster: own node only, parsing, and how failures are classified."""
from __future__ import annotations

import subprocess

import pytest

from executor.slurm.cli import (
    NotOwnNode,
    NotRequeueable,
    SlurmCli,
    SlurmError,
    Unreachable,
    parse_kv,
    parse_listpids,
)


class FakeRunner:
    """Stands in for subprocess.run: answers by command name, records every argv and its env."""

    def __init__(self, answers: dict[str, tuple[int, str, str]] | None = None, hang: bool = False) -> None:
        self.answers = answers or {}
        self.hang = hang
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str]] = []

    def __call__(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess:
        self.calls.append(argv)
        self.envs.append(kw["env"])  # type: ignore[arg-type]
        if self.hang:
            raise subprocess.TimeoutExpired(argv, kw["timeout"])  # type: ignore[arg-type]
        key = " ".join(argv[:2])
        rc, out, err = self.answers.get(key, (0, "", ""))
        return subprocess.CompletedProcess(argv, rc, out, err)


def cli(runner: FakeRunner) -> SlurmCli:
    return SlurmCli("n1", "/etc/slurm-test/slurm.conf", timeout_s=3.0, run=runner)


def test_refuses_another_node_before_running_anything():
    """DRAIN, RESUME, signal, requeue, cancel and reads name only this agent's node."""
    runner = FakeRunner()
    c = cli(runner)
    for call in (lambda: c.drain("n2", "x"), lambda: c.resume("n2"), lambda: c.node_info("n2"),
                 lambda: c.jobs_on("n2", "RUNNING"), lambda: c.node_state("n2"),
                 lambda: c.signal("n2", 1, "SIGUSR1", "batch"), lambda: c.requeue("n2", 1),
                 lambda: c.cancel("n2", 1)):
        with pytest.raises(NotOwnNode):
            call()
    assert runner.calls == []


def test_refuses_a_job_not_listed_on_this_node():
    """A job may be signalled, requeued or cancelled only after squeue -w <own node> listed it."""
    runner = FakeRunner({"squeue -h": (0, "11\n12\n", "")})
    c = cli(runner)
    with pytest.raises(NotOwnNode):
        c.requeue("n1", 11)
    assert c.jobs_on("n1", "RUNNING") == [11, 12]
    assert c.requeue("n1", 11) is True
    with pytest.raises(NotOwnNode):
        c.signal("n1", 99, "SIGUSR1", "batch")
    assert runner.calls[0] == ["squeue", "-h", "-w", "n1", "-t", "RUNNING", "-o", "%A"]
    assert runner.calls[1] == ["scontrol", "requeue", "11"]


def test_signal_always_names_batch_or_full_and_the_node():
    """Without --batch/--full nothing reaches a batch script; -w makes Slurm apply the node filter too."""
    runner = FakeRunner({"squeue -h": (0, "5\n", "")})
    c = cli(runner)
    c.jobs_on("n1", "RUNNING")
    c.signal("n1", 5, "SIGUSR1", "batch")
    c.signal("n1", 5, "SIGTERM", "full")
    assert runner.calls[1:] == [["scancel", "--signal=USR1", "--batch", "-w", "n1", "5"],
                                ["scancel", "--signal=TERM", "--full", "-w", "n1", "5"]]


def test_every_call_carries_slurm_conf_and_none_of_the_callers_slurm_variables(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    runner = FakeRunner()
    cli(runner).ping()
    assert runner.envs[0]["SLURM_CONF"] == "/etc/slurm-test/slurm.conf"
    assert "SLURM_JOB_ID" not in runner.envs[0]


def test_timeout_and_connect_failure_are_unreachable_a_refusal_is_not():
    with pytest.raises(Unreachable):
        cli(FakeRunner(hang=True)).node_info("n1")
    lost = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
    down = FakeRunner({"scontrol -o": (1, "", lost)})
    with pytest.raises(Unreachable):
        cli(down).node_info("n1")
    refused = FakeRunner({"scontrol update": (1, "", "Invalid node state specified")})
    with pytest.raises(SlurmError) as e:
        cli(refused).resume("n1")
    assert not isinstance(e.value, Unreachable)


def test_requeue_refused_gone_or_done():
    runner = FakeRunner({"squeue -h": (0, "3\n", ""),
                         "scontrol requeue": (1, "", "Requested operation is presently disabled for job 3")})
    c = cli(runner)
    c.jobs_on("n1", "RUNNING")
    with pytest.raises(NotRequeueable):
        c.requeue("n1", 3)
    runner.answers["scontrol requeue"] = (1, "", "Invalid job id specified for job 3")
    assert c.requeue("n1", 3) is False


def test_ping_is_false_on_any_failure():
    assert cli(FakeRunner()).ping() is True
    assert cli(FakeRunner({"scontrol ping": (1, "Slurmctld(primary) at n1 is DOWN", "")})).ping() is False
    assert cli(FakeRunner(hang=True)).ping() is False


def test_node_info_reads_flags_and_the_reason_without_slurms_suffix():
    line = ("NodeName=n1 Arch=x86_64 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 "
            "Reason=sco-agent notice n-1 reclaim deadline 2026-11-29T12:00:00.000Z [root@2026-11-29T11:58:01] "
            "Comment=(null)")
    runner = FakeRunner({"scontrol -o": (0, line + "\n", "")})
    info = cli(runner).node_info("n1")
    assert info.flags == {"IDLE", "DRAIN"} and info.drain_set
    assert info.reason == "sco-agent notice n-1 reclaim deadline 2026-11-29T12:00:00.000Z"


def test_node_state_picks_this_node_from_the_whole_cluster_read():
    runner = FakeRunner({"sinfo -h": (0, "n0 idle\nn1 drained\nn10 mixed\n", "")})
    assert cli(runner).node_state("n1") == "drained"
    assert runner.calls[0] == ["sinfo", "-h", "-N", "-o", "%N %T"]


def test_listpids_drops_the_bogus_rows_of_a_starting_step():
    """At step start proctrack/pgid lists PID -1 and PID 1; neither is ever a job's process."""
    text = ("PID      JOBID    STEPID   LOCALID GLOBALID\n"
            "-1       7        batch    0       0\n"
            "1        7        batch    -       -\n"
            "4242     7        batch    0       0\n"
            "4243     7        batch    -       -\n")
    rows = parse_listpids(text)
    assert [(r.pid, r.job, r.step, r.localid) for r in rows] == [(4242, 7, "batch", "0"), (4243, 7, "batch", "-")]


def test_parse_kv_keeps_spaces_in_values():
    assert parse_kv("A=1 Reason=two words B=3") == {"A": "1", "Reason": "two words", "B": "3"}


def test_changes_are_audited_reads_are_not():
    seen: list[tuple[str, ...]] = []
    runner = FakeRunner()
    c = SlurmCli("n1", "/c", run=runner, audit=seen.append)
    c.jobs_on("n1", "RUNNING")
    c.drain("n1", "r")
    assert seen == [("scontrol", "update", "nodename=n1", "state=DRAIN", "reason=r")]
