"""``extend`` from the stdlib client and from ``sco-checkpoint run --extend``, against a served socket."""
from __future__ import annotations

import os

import pytest

from common.timefmt import format_rfc3339, parse_rfc3339
from sco_checkpoint.client import ExtendRefused, extend, on_notice
from tests.sco_checkpoint.test_cli import _run_with_env, finish
from tests.support.agent_socket import make_notice, wait_until


@pytest.fixture
def listeners():
    started = []
    yield started
    for listener in started:
        listener.stop()


def notice_with_limit(nid: str, checkpoint_in: float, limit_in: float | None) -> dict:
    n = make_notice(nid, deadline_in=120, checkpoint_in=checkpoint_in)
    if limit_in is not None:   # from the same reading of the clock as checkpoint_by
        n["extend_limit"] = format_rfc3339(parse_rfc3339(n["checkpoint_by"]) - checkpoint_in + limit_in)
    return n


def test_extend_inside_the_callback_returns_the_grant_and_updates_the_notice(serve, listeners):
    st = serve()
    seen: list = []

    def slow_save(notice):
        before = notice["checkpoint_by"]
        seen.append((before, extend(3600), notice["checkpoint_by"]))

    listeners.append(on_notice(slow_save, path=st.path, name="job"))
    wait_until(lambda: st.stats()["registered"] == 1, what="registration")
    n = notice_with_limit("n1", checkpoint_in=10, limit_in=40)
    st.announce(n)
    wait_until(st.acks, what="the ack")
    [(before, granted, after)] = seen
    assert before == n["checkpoint_by"]
    assert granted == after == n["extend_limit"]   # asked an hour, got what the budget allows
    assert st.stats()["extensions"] == 1


def test_a_refused_extend_raises_and_the_checkpoint_still_answers(serve, listeners):
    st = serve()
    errors: list = []

    def save(notice):
        try:
            extend(5)
        except ExtendRefused as e:
            errors.append(str(e))

    listeners.append(on_notice(save, path=st.path))
    wait_until(lambda: st.stats()["registered"] == 1, what="registration")
    st.announce(notice_with_limit("n1", checkpoint_in=10, limit_in=None))   # no budget to grant from
    [ack] = wait_until(st.acks, what="the ack")
    assert ack.status == "checkpointed"
    assert len(errors) == 1 and errors[0].startswith("extend_refused: no_budget")


def test_extend_outside_a_callback_is_refused_locally():
    with pytest.raises(ExtendRefused):
        extend(5)


SLOW_SAVER = ("trap 'sleep 2; touch \"$SCO_CHECKPOINT_DONE\"' USR1; "
              "while [ ! -e \"$OUT.stop\" ]; do sleep 0.05; done; exit 0")


@pytest.mark.parametrize("extend_s", [None, "30"])
def test_run_extend_widens_the_window_to_the_grant(serve, sock_dir, extend_s):
    """checkpoint_by is 1 s away and the save takes 2 s: without --extend the window ends first
    (failed); with it the agent grants up to its limit and the save makes it (checkpointed)."""
    st = serve()
    out = os.path.join(sock_dir, "out")
    proc = _run_with_env(st.path, out, window="60", script=SLOW_SAVER,
                         extra=["--extend", extend_s] if extend_s else [])
    wait_until(lambda: st.stats()["registered"] == 1, what="the wrapper registering")
    n = notice_with_limit("n1", checkpoint_in=1, limit_in=20)
    st.announce(n)
    [ack] = wait_until(st.acks, timeout=15, what="the ack")
    open(out + ".stop", "w").close()
    finish(proc)
    if extend_s is None:
        assert ack.status == "failed"
    else:
        assert ack.status == "checkpointed"
        assert parse_rfc3339(n["extend_limit"]) > parse_rfc3339(n["checkpoint_by"])


def test_run_extend_refused_is_said_and_changes_nothing(serve, sock_dir):
    st = serve()
    out = os.path.join(sock_dir, "out")
    proc = _run_with_env(st.path, out, window="60", script=SLOW_SAVER, extra=["--extend", "30"])
    wait_until(lambda: st.stats()["registered"] == 1, what="the wrapper registering")
    st.announce(notice_with_limit("n1", checkpoint_in=1, limit_in=1))   # nothing grantable
    [ack] = wait_until(st.acks, timeout=15, what="the ack")
    open(out + ".stop", "w").close()
    _, _, err = finish(proc)
    assert ack.status == "failed"
    assert "no extension: extend_refused: at_limit" in err
