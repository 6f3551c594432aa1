"""sco-checkpoint end to end: real subprocesses against a served agent socket."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from sco_checkpoint.cli import checkpoint_window, main, parse_time
from tests.support.agent_socket import make_notice, wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args: str, path: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, SCO_AGENT_SOCKET=path, PYTHONPATH=REPO)
    return subprocess.Popen([sys.executable, "-m", "sco_checkpoint.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def finish(proc: subprocess.Popen, timeout: float = 20) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out, err


def test_wait_prints_the_notice_and_exits_0(serve):
    st = serve()
    proc = cli("wait", "--timeout", "15", path=st.path)
    wait_until(lambda: st.stats()["registered"] == 1, what="the CLI registering")
    notice = make_notice("n1")
    st.announce(notice)
    rc, out, _ = finish(proc)
    assert rc == 0
    assert json.loads(out) == {"op": "notice", **notice}


def test_wait_times_out_with_exit_2(serve):
    st = serve()
    rc, out, err = finish(cli("wait", "--timeout", "0.3", path=st.path))
    assert (rc, out) == (2, "")
    assert "no notice" in err


def test_ack_command(serve):
    st = serve()
    st.announce(make_notice("n1"))
    rc, out, _ = finish(cli("ack", "n1", "--failed", "--detail", "no space", path=st.path))
    assert rc == 0 and json.loads(out)["status"] == "failed"
    [ack] = wait_until(st.acks, what="the ack")
    assert (ack.status, ack.detail) == ("failed", "no space")
    rc, _, err = finish(cli("ack", "n-unknown", path=st.path))
    assert rc == 1 and "unknown_notice" in err


SAVER = ("trap 'echo saved > \"$OUT\"; touch \"$SCO_CHECKPOINT_DONE\"' USR1; "
         "while [ ! -e \"$OUT.stop\" ]; do sleep 0.05; done; exit 7")


def test_run_signals_the_command_and_acks_when_it_touches_the_done_file(serve, sock_dir):
    """The done file acks 'checkpointed' while CMD keeps running; the wrapper exits with CMD's status."""
    st = serve()
    out = os.path.join(sock_dir, "out")
    proc = _run_with_env(st.path, out)
    wait_until(lambda: st.stats()["registered"] == 1, what="the wrapper registering")
    st.announce(make_notice("n1"))
    [ack] = wait_until(st.acks, what="the ack")
    assert ack.status == "checkpointed" and ack.name == "sco-checkpoint run sh"
    with open(out) as f:
        assert f.read() == "saved\n"
    assert proc.poll() is None  # CMD still runs: moving it off is the agent's business
    open(out + ".stop", "w").close()
    assert finish(proc)[0] == 7


def _run_with_env(path: str, out: str, window: str = "15", script: str = SAVER,
                  extra: list[str] | None = None) -> subprocess.Popen:
    """sco-checkpoint run --signal USR1 [EXTRA...] -- sh -c SCRIPT, with $OUT for the script."""
    env = dict(os.environ, SCO_AGENT_SOCKET=path, PYTHONPATH=REPO, OUT=out)
    return subprocess.Popen([sys.executable, "-m", "sco_checkpoint.cli", "run", "--signal", "USR1",
                             "--window", window, *(extra or []), "--", "sh", "-c", script], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_run_acks_checkpointed_when_the_command_exits_0_on_the_signal(serve, sock_dir):
    st = serve()
    proc = _run_with_env(st.path, os.path.join(sock_dir, "out"),
                         script="trap 'exit 0' USR1; while :; do sleep 0.05; done")
    wait_until(lambda: st.stats()["registered"] == 1, what="the wrapper registering")
    st.announce(make_notice("n1"))
    assert finish(proc)[0] == 0
    [ack] = wait_until(st.acks, what="the ack")
    assert ack.status == "checkpointed"


def test_run_acks_failed_when_the_command_fails_or_the_window_ends(serve, sock_dir):
    st = serve()
    proc = _run_with_env(st.path, os.path.join(sock_dir, "out"),
                         script="trap '' USR1; while :; do sleep 0.05; done", window="0.5")
    wait_until(lambda: st.stats()["registered"] == 1, what="the wrapper registering")
    st.announce(make_notice("n1"))
    [ack] = wait_until(st.acks, what="the ack")
    assert ack.status == "failed"
    proc.send_signal(signal.SIGTERM)  # passed on to CMD's process group
    assert finish(proc)[0] == 128 + signal.SIGTERM


def test_run_without_an_agent_still_runs_the_command():
    env = dict(os.environ, SCO_AGENT_SOCKET="/nonexistent/agent.sock", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-m", "sco_checkpoint.cli", "run", "--", "sh", "-c",
                           "exit 3"], check=False, env=env, timeout=20)
    assert proc.returncode == 3


def test_usage_errors_exit_64(capsys):
    assert main(["run"]) == 64
    assert main(["run", "--signal", "NOPE", "--", "true"]) == 64
    assert main(["frobnicate"]) == 64
    assert main(["run", "--", "/nonexistent/cmd"]) == 127


@pytest.mark.parametrize(("window", "left", "expected"), [(60, 30, 30), (10, 30, 10), (10, -5, 0)])
def test_checkpoint_window_is_capped_by_checkpoint_by(window, left, expected):
    import time

    now = time.time()
    notice = make_notice("n", checkpoint_in=left)
    assert checkpoint_window(notice, window, now) == pytest.approx(expected, abs=0.01)
    assert checkpoint_window({"checkpoint_by": "garbage"}, window, now) == window
    assert checkpoint_window({}, window, now) == window


@pytest.mark.parametrize("epoch", [0.0, 1_790_000_000.125, 253402300799.0])
def test_parse_time_reads_what_the_agent_writes(epoch):
    """The stdlib parser agrees with the agent's own formatter and parser (common.timefmt)."""
    from common.timefmt import format_rfc3339, parse_rfc3339

    text = format_rfc3339(epoch)
    assert parse_time(text) == pytest.approx(parse_rfc3339(text), abs=1e-6)
    assert parse_time(text.replace("Z", "+02:00")) == pytest.approx(epoch - 7200, abs=1e-3)


@pytest.mark.parametrize("text", [None, 17, "", "garbage", "2026-11-29T12:00:00", "2026-11-29", "9" * 50])
def test_parse_time_refuses_anything_without_an_offset(text):
    with pytest.raises(ValueError):
        parse_time(text)


def test_stdout_of_wait_is_only_the_notice(serve):
    """Shell scripts parse stdout: nothing else may be printed there."""
    st = serve()
    st.announce(make_notice("n1"))
    rc, out, _ = finish(cli("wait", "--timeout", "15", path=st.path))
    assert rc == 0 and out.count("\n") == 1
