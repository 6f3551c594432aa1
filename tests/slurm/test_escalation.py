"""The executor's view of the verifier's escalation levels (verifier.pub, topic escalate)."""
from __future__ import annotations

import shutil
import tempfile
import time

import pytest
import zmq

from common import ipc
from executor.escalation import EscalationFeed, parse
from tests.procutil import wait_for


def test_parse_takes_the_level_of_each_notice_and_skips_unknown_ones():
    body = {"notices": {"a": {"level": "checkpoint_over", "since": 1.0}, "b": "final",
                        "c": {"level": "panic"}, "d": 7}}
    assert parse(body) == {"a": "checkpoint_over", "b": "final"}


def test_parse_refuses_a_message_without_notices():
    with pytest.raises(ValueError):
        parse({"notices": []})


def test_feed_follows_the_latest_level_triggered_message():
    """Each message is the whole state: a notice no longer listed has no level."""
    run_dir = tempfile.mkdtemp(prefix="sco-esc-", dir="/tmp")
    ctx = zmq.Context()
    try:
        pub = ipc.bind(ctx, zmq.PUB, run_dir, ipc.VERIFIER_PUB)
        feed = EscalationFeed(ctx, run_dir)

        def sent_and_seen(body: dict, nid: str, level: str | None) -> bool:
            ipc.send(pub, ipc.T_ESCALATE, body)
            time.sleep(0.02)
            return feed.level(nid) == level

        wait_for(lambda: sent_and_seen({"notices": {"n1": {"level": "evict_over", "since": 1.0}}}, "n1", "evict_over"),
                 5, "evict_over seen")
        ipc.send(pub, ipc.T_VERDICT, {"verdicts": {}})  # another topic: not subscribed
        wait_for(lambda: sent_and_seen({"notices": {}}, "n1", None), 5, "level cleared")
        assert feed.rejected == 0
    finally:
        ctx.destroy(linger=0)
        shutil.rmtree(run_dir, ignore_errors=True)
