"""The verifier's core: done before the cutoff, overrun after it, naming what held it up."""
from __future__ import annotations

from common.notice import Notice
from verifier.judge import judge

N = Notice(id="n1", kind="reclaim", node="me", instance_id="", issued_at=0.0, deadline=120.0,
           source="aws", received_at=1.0)


def test_open_before_cutoff():
    assert judge(N, {"steps": {"cordoned": 2.0}}, 5.0, now=50.0) is None


def test_done_when_empty_before_cutoff():
    v = judge(N, {"steps": {"cordoned": 2.0, "node_empty": 30.0}}, 5.0, now=30.1)
    assert v.outcome == "done"


def test_overrun_when_empty_after_cutoff():
    v = judge(N, {"steps": {"cordoned": 2.0, "node_empty": 116.0}}, 5.0, now=116.1)
    assert v.outcome == "overrun" and v.held_up_by == "late"


def test_overrun_at_cutoff_names_what_is_left():
    v = judge(N, {"steps": {"cordoned": 2.0}, "remaining": ["ns/p1"]}, 5.0, now=115.0)
    assert v.outcome == "overrun" and v.held_up_by == "evict" and v.left == ("ns/p1",)


def test_overrun_without_cordon_blames_cordon():
    assert judge(N, None, 5.0, now=200.0).held_up_by == "cordon"


def test_cordon_only_policy_is_done_once_cordoned():
    assert judge(N, {"state": "cordoned_only", "steps": {"cordoned": 3.0}}, 5.0, now=3.1).outcome == "done"
