"""The rig's pure parts (slurm.conf, output parsing) and its PID guard, without Slurm."""
from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests.rigs.slurm import conf, procs
from tests.support.wait import wait_for

SLURMD_C = (
    "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105\n"
    "UpTime=0-00:04:16\n"
)


def test_node_line_comes_from_slurmd_and_is_pinned_to_loopback() -> None:
    """The NodeName line is slurmd's own, with NodeAddr forced to 127.0.0.1."""
    line = conf.node_line(SLURMD_C)
    assert line.startswith("NodeName=vm CPUs=2 ")
    assert line.endswith(" NodeAddr=127.0.0.1")
    assert "UpTime" not in line
    assert conf.node_name_of(line) == "vm"


def test_node_line_without_nodename_is_a_clear_error() -> None:
    """Unexpected slurmd -C output is refused with the output in the message."""
    with pytest.raises(ValueError, match="no NodeName"):
        conf.node_line("garbage\n")


def test_conf_explains_every_setting_and_uses_the_given_ports() -> None:
    """Each setting is preceded by its reason; ports and rig paths are the ones given."""
    paths = conf.RigPaths("/r")
    text = conf.render_conf(paths, "NodeName=vm NodeAddr=127.0.0.1", 20001, 20002)
    lines = text.splitlines()
    assert "SlurmctldPort=20001" in lines and "SlurmdPort=20002" in lines
    assert "AuthInfo=socket=/r/munge/munge.socket" in lines
    assert "ProctrackType=proctrack/pgid" in lines and "KillWait=5" in lines
    for i, line in enumerate(lines):
        if "=" in line and not line.startswith(("#", "NodeName", "PartitionName")):
            assert lines[i - 1].startswith("# "), f"{line} has no reason above it"


def test_overrides_replace_a_setting_or_add_one() -> None:
    """An override replaces the default in place (any case) and new keys are appended."""
    text = conf.render_conf(conf.RigPaths("/r"), "NodeName=vm", 1, 2,
                            {"killwait": "30", "SchedulerParameters": "defer"})
    lines = text.splitlines()
    assert "KillWait=30" in lines and "KillWait=5" not in lines
    assert "SchedulerParameters=defer" in lines


def test_parse_kv_keeps_values_with_spaces() -> None:
    """A Reason with spaces stays one value; the next key starts a new one."""
    line = "NodeName=vm State=IDLE+DRAIN Reason=spot reclaim soon [root@2026-11-29T21:00:00] Comment=(null)"
    kv = conf.parse_kv(line)
    assert kv["State"] == "IDLE+DRAIN"
    assert kv["Reason"] == "spot reclaim soon [root@2026-11-29T21:00:00]"
    assert kv["Comment"] == "(null)"


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_recorded_process_is_signalled_only_while_it_is_the_same(child: subprocess.Popen[bytes]) -> None:
    """A different start time (a reused PID) or command-line marker makes send() refuse."""
    # Popen returns once the exec has begun: the new command line may be readable a moment later.
    rec = wait_for(lambda: (r := procs.identify(child.pid, marker="sleep 60")) is not None and r.comm == "sleep"
                   and procs.is_alive(r) and r, 5, "the child identified as sleep 60")
    assert not procs.send(replace(rec, starttime=rec.starttime + 1), signal.SIGTERM)
    assert not procs.send(replace(rec, marker="other"), signal.SIGTERM)
    assert child.poll() is None
    assert procs.send(rec, signal.SIGTERM)
    child.wait(timeout=5)
    assert not procs.is_alive(rec)
    assert not procs.send(rec, signal.SIGTERM)


def test_terminate_escalates_to_kill() -> None:
    """A process ignoring SIGTERM is SIGKILLed after the bound and none survive."""
    # One process that never execs after "armed": its comm stays what identify() recorded.
    ignore_term = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('armed', flush=True); time.sleep(60)"
    stubborn = subprocess.Popen([sys.executable, "-c", ignore_term], stdout=subprocess.PIPE)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"armed\n"
        rec = procs.identify(stubborn.pid)
        assert rec is not None
        # Our own child lingers as a zombie until waited for: is_alive counts that as gone.
        assert procs.terminate([rec], term_timeout=0.3, kill_timeout=5) == []
        assert stubborn.wait(timeout=5) == -signal.SIGKILL
    finally:
        stubborn.kill()
        stubborn.wait()
