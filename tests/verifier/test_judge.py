"""The judge: done before the cutoff, overrun at it naming the step and what was left; escalation levels."""
from __future__ import annotations

from common.contract import BUILTIN
from common.notice import Notice
from common.wire import DrainRecord, Escalation
from tests.support.drain_records import budget, record
from tests.support.notices import notice
from verifier.judge import (
    PROGRESS_GRACE_S,
    VERIFY_WAIT_S,
    Observation,
    clock_for,
    escalation,
    held_up_by,
    judge,
    start_clock,
)

N = Notice(id="n1", kind="reclaim", node="me", instance_id="", issued_at=0.0, deadline=120.0,
           source="aws", received_at=1.0)
BUDGET = budget(checkpoint_s=20, evict_s=60, margin_s=5)
CLOCK = start_clock(N, BUDGET)


def rec(steps, remaining=None, **fields):
    return record(N, budget=BUDGET, steps=steps, remaining=remaining, **fields)
AFTER = CLOCK.cutoff + 0.1   # a progress report sent after the cutoff
AGREES = Observation(1e6, True, ())   # the verifier's own read, after every report here: empty, cordoned


def test_clock_phases_follow_the_contract_from_receipt():
    """Checkpoint ends checkpoint_s after receipt, eviction evict_s after that, the margin before the deadline."""
    assert (CLOCK.checkpoint_at, CLOCK.evict_at, CLOCK.cutoff) == (21.0, 81.0, 115.0)


def test_short_notice_squeezes_phases_to_the_cutoff():
    """A 30 s notice with a 100 s contract: every phase ends by the cutoff, in order."""
    short = Notice("g", "reclaim", "me", "", 0.0, 30.0, "gcp", received_at=0.5)
    c = start_clock(short, budget(checkpoint_s=40, evict_s=50, margin_s=10))
    assert c.checkpoint_at == c.evict_at == c.cutoff == 20.0


def test_the_drain_records_receipt_is_the_clocks():
    """The executor's drain started when it received the notice: its record's time is the one to time by."""
    c = start_clock(N, BUDGET, received_at=3.0)
    assert (c.received_at, c.checkpoint_at, c.evict_at, c.cutoff) == (3.0, 23.0, 83.0, 115.0)


def test_escalation_levels_in_order():
    assert escalation(CLOCK, 20.0) is None
    assert escalation(CLOCK, 21.0) == Escalation("checkpoint_over", 21.0)
    assert escalation(CLOCK, 90.0) == Escalation("evict_over", 81.0)
    assert escalation(CLOCK, 200.0) == Escalation("final", 115.0)


def test_open_before_cutoff():
    assert judge(CLOCK, rec({"cordoned": 2.0}, ["a/b"]), 50.0, now=50.0) is None


def test_done_when_empty_before_cutoff():
    v = judge(CLOCK, rec({"cordoned": 2.0, "node_empty": 30.0}), 30.0, now=30.1, seen=AGREES)
    assert v.outcome == "done" and v.finished_at == 30.0 and v.held_up_by == ""


def test_done_when_the_scheduler_reports_nothing_left():
    """No node_empty step yet, but the executor read the scheduler and nothing counts: done as of that report."""
    v = judge(CLOCK, rec({"cordoned": 2.0}, []), 40.0, now=40.2, seen=AGREES)
    assert v.outcome == "done" and v.finished_at == 40.0


def test_nothing_left_before_cordon_is_not_done():
    """Empty but not cordoned: new work could still land, so not done."""
    assert judge(CLOCK, rec({}, []), 40.0, now=40.2) is None


def test_overrun_at_cutoff_names_what_is_left_and_the_step():
    progress = rec({"cordoned": 2.0, "clients_told": 2.1, "evicted": 90.0}, ["ns/p1"])
    v = judge(CLOCK, progress, AFTER, now=AFTER)
    assert (v.outcome, v.held_up_by, v.left) == ("overrun", "evict", ("ns/p1",))


def test_overrun_waits_for_a_report_from_after_the_cutoff():
    """A node that emptied just before the cutoff is not called overrun on stale news."""
    progress = rec({"cordoned": 2.0}, ["ns/p1"])
    assert judge(CLOCK, progress, CLOCK.cutoff - 0.5, now=CLOCK.cutoff + 0.1) is None
    v = judge(CLOCK, progress, CLOCK.cutoff - 0.5, now=CLOCK.cutoff + PROGRESS_GRACE_S)
    assert v.outcome == "overrun"


def test_empty_after_cutoff_is_overrun_blaming_the_step_at_the_cutoff():
    """Seen only after a verifier restart: late, and the step running at the cutoff is named."""
    progress = rec({"cordoned": 2.0, "requeued": 100.0, "node_empty": 116.0}, [])
    v = judge(CLOCK, progress, 130.0, now=130.0, move_step="requeue")
    assert (v.outcome, v.held_up_by, v.finished_at) == ("overrun", "requeue", 116.0)


def test_steps_after_the_cutoff_do_not_count_for_the_blame():
    progress = rec({"cordoned": 2.0, "clients_told": 3.0, "fallback": 117.0}, ["x"])
    assert held_up_by(CLOCK, progress, "evict") == "checkpoint"


def test_blame_order():
    def held(steps, phase="", move="evict"):
        return held_up_by(CLOCK, rec(steps, phase=phase), move)
    assert held({}) == "cordon"
    assert held({"cordoned": 1}) == "evict"
    assert held({"cordoned": 1}, move="requeue") == "requeue"
    assert held({"cordoned": 1, "clients_told": 2}) == "checkpoint"
    assert held({"cordoned": 1, "clients_told": 2, "deleted": 3}) == "evict"
    assert held({"cordoned": 1, "signalled": 2}) == "requeue"
    assert held({"cordoned": 1, "evicted": 2, "fallback": 3}) == "fallback"
    assert held({"cordoned": 1, "clients_told": 2}, phase="requeue") == "requeue"
    assert held({"cordoned": 1}, phase="bogus") == "evict"


def test_overrun_without_progress_blames_cordon():
    assert judge(CLOCK, None, 0.0, now=200.0).held_up_by == "cordon"


def test_notice_received_after_its_cutoff_blames_the_notice():
    late = Notice("l", "reclaim", "me", "", 0.0, 120.0, "aws", received_at=118.0)
    c = start_clock(late, BUDGET)
    v = judge(c, rec({}), 118.5, now=118.5)
    assert (v.outcome, v.held_up_by) == ("overrun", "notice")
    assert escalation(c, 118.5) == Escalation("final", 115.0)


def test_cordon_only_policy_is_judged_cordoned_not_done():
    """A cordon-only notice's node was never emptied: its verdict says what it is (issue 28), not "done"."""
    v = judge(CLOCK, rec({"cordoned": 3.0}, state="cordoned_only"), 3.1, now=3.1, seen=AGREES)
    assert v.outcome == "cordoned" and v.finished_at == 3.0
    assert "cordon only" in v.reason and "moves none" in v.reason


def test_a_waiting_deferred_drain_is_not_finished_even_with_nothing_left():
    """A deferred drain, cordoned, its start not come: neither done nor cordoned, whatever it read."""
    waiting = rec({"cordoned": 3.0}, [], state="waiting")
    assert judge(CLOCK, waiting, 3.1, now=3.1, seen=AGREES) is None


# -- the verifier's own read (issue 16) -----------------------------------------------------------

EMPTY_AT_30 = rec({"cordoned": 2.0, "node_empty": 30.0}, [], state="done")


def test_done_waits_for_a_read_made_after_the_report():
    """The executor's word alone is not done: a read from before its report does not count."""
    assert judge(CLOCK, EMPTY_AT_30, 30.0, now=30.5, seen=Observation(29.0, True, ())) is None
    v = judge(CLOCK, EMPTY_AT_30, 30.0, now=31.2, seen=Observation(31.0, True, ()))
    assert v.outcome == "done" and v.finished_at == 30.0


def test_a_wrong_report_is_unverified_with_what_the_read_found():
    """The executor says empty; the API server lists a pod: never done, and the reason says why."""
    seen = Observation(31.0, True, ("ns/still-here",))
    assert judge(CLOCK, EMPTY_AT_30, 30.0, now=CLOCK.cutoff - 0.1, seen=seen) is None   # until the cutoff to agree
    v = judge(CLOCK, EMPTY_AT_30, 30.0, now=CLOCK.cutoff, seen=seen, waited_s=CLOCK.cutoff - 30.0)
    assert v.outcome == "unverified" and v.left == ("ns/still-here",)
    assert "empty" in v.reason and "ns/still-here" in v.reason


def test_unreadable_scheduler_is_unverified_never_done():
    seen = Observation(31.0, False, None, "GET /api/v1/pods: timeout")
    assert judge(CLOCK, EMPTY_AT_30, 30.0, now=30.0 + VERIFY_WAIT_S, seen=seen, waited_s=VERIFY_WAIT_S) is None
    v = judge(CLOCK, EMPTY_AT_30, 30.0, now=CLOCK.cutoff, seen=seen, waited_s=CLOCK.cutoff - 30.0)
    assert v.outcome == "unverified" and "cannot read" in v.reason and "timeout" in v.reason
    v = judge(CLOCK, EMPTY_AT_30, 30.0, now=CLOCK.cutoff, seen=None, waited_s=CLOCK.cutoff - 30.0)
    assert v.outcome == "unverified" and "no read" in v.reason


def test_cordon_only_needs_the_read_to_see_the_cordon():
    r = rec({"cordoned": 3.0}, state="cordoned_only")
    v = judge(CLOCK, r, 3.1, now=CLOCK.cutoff, seen=Observation(3.5, False, ("ns/a",)), waited_s=CLOCK.cutoff - 3.1)
    assert v.outcome == "unverified" and "not cordoned" in v.reason


def test_a_report_just_before_the_cutoff_still_gets_verify_wait_s_to_agree():
    late = rec({"cordoned": 2.0, "node_empty": CLOCK.cutoff - 1}, [], state="done")
    seen = Observation(CLOCK.cutoff - 2, True, ("ns/a",))
    assert judge(CLOCK, late, CLOCK.cutoff - 1, now=CLOCK.cutoff + 1, seen=seen, waited_s=2.0) is None
    v = judge(CLOCK, late, CLOCK.cutoff - 1, now=CLOCK.cutoff + VERIFY_WAIT_S, seen=seen, waited_s=VERIFY_WAIT_S)
    assert v.outcome == "unverified"


def test_the_verify_wait_is_an_interval_a_wall_clock_stepped_ahead_does_not_end():
    """A wall clock stepped 60 s ahead just after the report (the cutoff passed with it): the read
    still gets VERIFY_WAIT_S, counted on the monotonic clock, before the verdict is unverified."""
    late = rec({"cordoned": 2.0, "node_empty": CLOCK.cutoff - 1}, [], state="done")
    seen = Observation(CLOCK.cutoff - 2, True, ("ns/a",))    # a read from before the report
    assert judge(CLOCK, late, CLOCK.cutoff - 1, now=CLOCK.cutoff + 60, seen=seen, waited_s=0.5) is None
    agrees = Observation(CLOCK.cutoff + 60.5, True, ())
    v = judge(CLOCK, late, CLOCK.cutoff - 1, now=CLOCK.cutoff + 61, seen=agrees, waited_s=1.5)
    assert v.outcome == "done"


def test_dry_run_and_ignored_get_verdicts_of_their_own():
    for state in ("dry_run", "ignored"):
        v = judge(CLOCK, rec({}, None, state=state), 3.0, now=3.0)
        assert v.outcome == state and "nothing was done" in v.reason


def test_an_overrun_names_a_config_error_and_a_fallback_that_could_not_run():
    r = rec({"cordoned": 2.0}, ["ns/a"], problem="403 Forbidden: nodes is forbidden")
    v = judge(CLOCK, r, AFTER, now=AFTER)
    assert v.outcome == "overrun" and v.reason == "configuration error: 403 Forbidden: nodes is forbidden"
    r = rec({"cordoned": 2.0}, ["api-server:unreachable"], fallback_allowed=False)
    v = judge(CLOCK, r, AFTER, now=AFTER)
    assert "no fallback ran" in v.reason and "allows no fallback for a reclaim notice" in v.reason


def test_a_deferred_drain_is_timed_and_escalated_from_its_start():
    """Issue 28: a maintenance whose drain starts at deadline - budget_s is not escalated (nor its
    PDB-blocked pods deleted) days before: its checkpoint and evict cutoffs run from its start."""
    n = notice("m", "maintenance", deadline_in=86400.0, now=1_800_000_000.0)
    rec = DrainRecord.start(n, BUILTIN)
    starts = n.deadline - BUILTIN.drain.budget_s
    clock = clock_for(n, rec, rec.budget)
    assert clock.checkpoint_at == starts + BUILTIN.drain.checkpoint_s and not clock.moved_by(rec)
    assert clock.received_at == rec.received_at   # the receipt stays the receipt ("notice", withdrawals)
    assert start_clock(n, rec.budget, rec.received_at).moved_by(rec)   # a clock started at once is moved
    assert escalation(clock, n.received_at + 3600) is None
    assert escalation(clock, starts + BUILTIN.drain.checkpoint_s).level == "checkpoint_over"
