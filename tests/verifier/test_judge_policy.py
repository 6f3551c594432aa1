"""The verifier and a pod whose own policy is skip (DESIGN section 9): a rebalance or maintenance
leaves it, so the verifier's own read does not count it against "done"; a reclaim does."""
from __future__ import annotations

import dataclasses

import pytest

from tests.verifier.test_judge import CLOCK, EMPTY_AT_30
from verifier.judge import Observation, judge

SEEN = Observation(31.0, True, ("default/keep",), skipped=("default/keep",))


@pytest.mark.parametrize("kind", ["rebalance", "maintenance"])
def test_a_skip_pod_left_in_place_does_not_keep_the_verifier_from_done(kind):
    v = judge(CLOCK, dataclasses.replace(EMPTY_AT_30, kind=kind), 30.0, now=31.2, seen=SEEN)
    assert v is not None and v.outcome == "done"


def test_on_a_reclaim_a_skip_pod_still_there_is_never_done():
    rec = dataclasses.replace(EMPTY_AT_30, kind="reclaim")
    assert judge(CLOCK, rec, 30.0, now=31.2, seen=SEEN) is None     # given until the cutoff to agree
    v = judge(CLOCK, rec, 30.0, now=CLOCK.cutoff, seen=SEEN, waited_s=CLOCK.cutoff - 30.0)
    assert v.outcome == "unverified" and v.left == ("default/keep",)


def test_a_pod_not_skipped_still_counts_on_a_rebalance():
    seen = Observation(31.0, True, ("default/keep", "default/web"), skipped=("default/keep",))
    v = judge(CLOCK, dataclasses.replace(EMPTY_AT_30, kind="rebalance"), 30.0, now=CLOCK.cutoff, seen=seen,
              waited_s=CLOCK.cutoff - 30.0)
    assert v.outcome == "unverified" and "default/web" in v.reason and "default/keep" not in v.reason
