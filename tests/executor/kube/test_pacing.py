"""The API-load decisions (pure): 429 classification, the two retry policies, the hall's write spread,
and the watched view of the node's pods."""
from __future__ import annotations

import pytest

from common.wire import Budget, phase_ends
from executor.kube import pacing
from executor.kube.book_records import Inputs
from executor.kube.eviction_book import EvictionBook
from executor.kube.pod_state import Answer, PodState, transition
from executor.kube.pod_view import OK, RELIST, PodView, namespaces_of
from tests.emulators.kube.client import APF_REJECTION_BODY
from tests.executor.kube import podspecs
from tests.support.clocks import at

PDB_429 = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429, "reason": "TooManyRequests",
           "message": "Cannot evict pod as it would violate the pod's disruption budget.",
           "details": {"causes": [{"reason": "DisruptionBudget",
                                   "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]}}


def test_a_disruption_budget_cause_is_a_pdb_refusal_anything_else_is_throttling():
    assert pacing.classify_429(PDB_429) == pacing.PDB_REFUSAL
    assert pacing.classify_429({}) == pacing.THROTTLED   # 1.20's APF answer is not even a Status
    assert APF_REJECTION_BODY.startswith("Too many requests")
    assert pacing.classify_429({"kind": "Status", "code": 429, "reason": "TooManyRequests",
                                "details": {"causes": [{"reason": "Other"}]}}) == pacing.THROTTLED
    assert pacing.classify_429({"details": "garbage"}) == pacing.THROTTLED


@pytest.mark.parametrize(("header", "seconds"), [("1", 1.0), (" 10 ", 10.0), ("0", 0.0), ("86400", 60.0),
                                                 (None, None), ("", None), ("-1", None), ("1.5", None),
                                                 ("Wed, 21 Oct 2015 07:28:00 GMT", None), ("\u0661", None)])
def test_retry_after_is_read_as_delta_seconds_and_clamped(header, seconds):
    assert pacing.retry_after_s(header) == seconds


def test_throttling_never_retries_before_retry_after_and_backs_off_with_jitter():
    for attempts in range(1, 8):
        low = pacing.throttled_delay(attempts, 1.0, lambda: 0.0)
        high = pacing.throttled_delay(attempts, 1.0, lambda: 1.0)
        assert 1.0 <= low <= high <= low * (1 + pacing.THROTTLE_JITTER) + 1e-9
    assert pacing.throttled_delay(1, None, lambda: 0.0) == pacing.THROTTLE_DEFAULT_S
    assert pacing.throttled_delay(2, 1.0, lambda: 0.0) == 2.0
    assert pacing.throttled_delay(20, 1.0, lambda: 0.0) == pacing.THROTTLE_MAX_S
    assert pacing.throttled_delay(1, 30.0, lambda: 0.0) == 30.0   # a longer Retry-After wins
    assert pacing.throttled_delay(1, 1.0, lambda: 7.0) <= 1.0 * (1 + pacing.THROTTLE_JITTER)   # a bad draw is clamped


def test_a_pdb_refusal_retries_soon_but_honours_a_retry_after():
    assert pacing.refused_delay(1, None, lambda: 0.0) == pytest.approx(0.1)
    assert pacing.refused_delay(10, None, lambda: 0.0) == pacing.REFUSED_MAX_S
    assert pacing.refused_delay(1, 0.0, lambda: 0.0) == pytest.approx(0.1)   # 1.20 says 0: no floor
    assert pacing.refused_delay(1, 10.0, lambda: 0.0) == 10.0                # newer servers say 10
    assert pacing.refused_delay(10, None, lambda: 1.0) == pacing.REFUSED_MAX_S * (1 + pacing.REFUSED_JITTER)


def test_the_eviction_spread_is_deterministic_bounded_and_spreads_a_hall():
    slots = [pacing.eviction_spread_delay(f"node-{i:03d}", 2.0) for i in range(500)]
    assert slots == [pacing.eviction_spread_delay(f"node-{i:03d}", 2.0) for i in range(500)]
    assert all(0.0 <= s < 2.0 for s in slots)
    per_tenth = [sum(1 for s in slots if k * 0.2 <= s < (k + 1) * 0.2) for k in range(10)]
    assert min(per_tenth) >= 25, per_tenth   # ~50 each: no burst in one part of the window
    assert pacing.eviction_spread_delay("node-000", 0.0) == 0.0


def test_the_book_retries_a_throttled_pod_after_retry_after_without_counting_an_attempt():
    st = transition(PodState(phase="in_flight"), Answer("throttled", retry_after=2.0), 100.0, draw=0.0)
    assert st.phase == "retry" and st.retry_at == 102.0 and st.attempts == 0 and st.throttles == 1
    st = transition(PodState(phase="in_flight"), Answer("blocked", retry_after=None), 100.0, draw=0.0)
    assert st.attempts == 1 and st.retry_at == pytest.approx(100.1) and st.blocked_since == 100.0


def pod(name: str, node: str = "n1", ns: str = "default", rv: str = "5") -> dict:
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": rv},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_the_view_follows_watch_events_and_asks_for_a_list_after_410():
    view = PodView("n1")
    assert view.snapshot() is None
    view.reset([pod("a"), pod("stray", node="n2")], "10")
    assert [p["metadata"]["name"] for p in view.snapshot() or []] == ["a"]
    assert view.apply({"type": "ADDED", "object": pod("b", rv="11")}) == OK
    assert view.apply({"type": "MODIFIED", "object": pod("a", rv="12")}) == OK
    assert view.apply({"type": "DELETED", "object": pod("b", rv="13")}) == OK
    assert view.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}) == OK
    assert view.resource_version == "20" and sorted(view.pods) == ["uid-a"]
    assert view.apply({"type": "MODIFIED", "object": pod("a", node="n2", rv="21")}) == OK   # moved away
    assert view.pods == {}
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    assert view.apply(gone) == RELIST
    assert view.apply({"type": "ADDED"}) == OK and view.apply({"type": "WHAT", "object": {}}) == OK


def test_pdbs_are_read_in_the_namespaces_of_pods_that_still_count():
    done = pod("done", ns="old")
    done["status"]["phase"] = "Succeeded"
    pods = [pod("a", ns="x"), pod("b", ns="y"), done]
    assert namespaces_of(pods) == {"x", "y", "old"}
    assert namespaces_of(pods, counting=True) == {"x", "y"}


def test_an_error_backs_off_from_half_a_second_to_8_s_with_jitter():
    assert [pacing.error_delay(n, lambda: 0.0) for n in (1, 2, 3, 4, 5, 9)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert pacing.error_delay(1, lambda: 1.0) == 0.75 and pacing.error_delay(9, lambda: 1.0) == 12.0
    assert pacing.error_delay(1, lambda: 7.0) == 0.75   # a draw out of [0, 1) is clamped


def _half() -> float:
    return 0.5


def test_an_apf_rejection_halves_the_evictions_in_flight_once_per_round_trip():
    lim = pacing.ConcurrencyLimit(8)
    assert lim.slots() == 8
    lim.answered("throttled", sent_at=1.0, latency_s=0.01, now=1.01, rand=_half)
    assert lim.slots() == 4
    # The rest of that burst was sent before the cut: it says nothing new.
    for _ in range(5):
        lim.answered("throttled", sent_at=1.0, latency_s=0.01, now=1.02, rand=_half)
    assert lim.slots() == 4 and lim.cuts == 1
    lim.answered("throttled", sent_at=1.5, latency_s=0.01, now=1.51, rand=_half)   # sent under the new limit
    lim.answered("throttled", sent_at=2.0, latency_s=0.01, now=2.01, rand=_half)
    lim.answered("throttled", sent_at=2.5, latency_s=0.01, now=2.51, rand=_half)
    assert lim.slots() == 1                                                      # never below one
    lim.answered("throttled", sent_at=3.0, latency_s=0.01, now=3.01, rand=_half)
    assert lim.limit == 1.0


def test_answers_add_about_one_per_round_trip_up_to_the_workers_jittered():
    lim = pacing.ConcurrencyLimit(8)
    lim.limit = 2.0
    for i in range(2):                              # one round trip of answers at limit 2
        lim.answered("accepted", sent_at=i, latency_s=0.02, now=i + 0.02, rand=_half)
    assert lim.limit == pytest.approx(2 + 1 / 2 + 1 / 2.5)
    low, high = pacing.ConcurrencyLimit(8), pacing.ConcurrencyLimit(8)
    low.limit = high.limit = 2.0
    low.answered("accepted", 0.0, 0.02, 0.02, rand=lambda: 0.0)
    high.answered("accepted", 0.0, 0.02, 0.02, rand=lambda: 0.99)
    assert low.limit < high.limit                   # the step is drawn: agents do not climb in step
    for i in range(200):
        lim.answered("blocked", sent_at=10.0 + i, latency_s=0.02, now=10.02 + i, rand=_half)   # PDB 429: fast
    assert lim.slots() == 8 and lim.limit == 8.0


def test_a_slow_answer_or_none_cuts_by_a_fifth_a_fast_one_never_does():
    lim = pacing.ConcurrencyLimit(8)
    for i in range(10):
        lim.answered("accepted", sent_at=i, latency_s=0.05, now=i + 0.05, rand=_half)
    lim.answered("accepted", sent_at=20.0, latency_s=0.4, now=20.4, rand=_half)   # 8x, but under the floor
    assert lim.cuts == 0
    lim.answered("accepted", sent_at=21.0, latency_s=2.0, now=23.0, rand=_half)   # queued by the server
    assert lim.cuts == 1 and lim.limit == pytest.approx(8 * pacing.AIMD_SLOW)
    lim.answered("unreachable", sent_at=24.0, latency_s=5.0, now=29.0, rand=_half)
    assert lim.cuts == 2 and lim.limit == pytest.approx(8 * pacing.AIMD_SLOW ** 2)


def test_the_book_sends_no_more_than_its_concurrency_limit_allows():
    ends = phase_ends(0.0, 100.0, Budget(budget_s=70, checkpoint_s=0, evict_s=60, margin_s=10))
    book = EvictionBook(ends, 0.0, "report")
    book.observe([podspecs.pod(f"app-{i}") for i in range(12)], [])
    first, _ = book.next_actions(at(1.0), Inputs(), 8)
    assert len(first) == 8
    for a in first[:6]:   # APF admits 2 of the 8: one cut (the 6 were sent together), to 4
        book.answer(a.uid, Answer("throttled", retry_after=1.0, sent_at=1.0, latency_s=0.01), at(1.01))
    for a in first[6:]:
        book.answer(a.uid, Answer("accepted", sent_at=1.0, latency_s=0.05), at(1.05))
    assert book.limit.slots() == 4
    again, _ = book.next_actions(at(5.0), Inputs(), 8)   # past the Retry-After
    assert len(again) == 4
