"""The eviction state machine and scheduler, driven by hand: no server, no threads, no clock."""
from __future__ import annotations

import dataclasses

import pytest

from common.wire import Budget, phase_ends
from executor.kube.book_records import Inputs
from executor.kube.eviction_book import STUCK_AFTER_S, EvictionBook
from executor.kube.pacing import LANE_WAKE_S, REFUSED_MAX_S
from executor.kube.pod_state import ACCEPTED, GONE, RETRY, Answer, PodState, transition
from tests.executor.kube.podspecs import pdb, pod
from tests.support.clocks import at

T0 = 1000.0
# Checkpoint until T0+10, evict by the book until T0+60, node empty by T0+90.
D = phase_ends(T0, T0 + 100, Budget(budget_s=70, checkpoint_s=10, evict_s=50, margin_s=10))
WEB = [pod(f"web-{i}", labels={"app": "web"}) for i in range(3)]
WEB_PDB = [pdb("web", {"app": "web"})]


def book(pods, pdbs=(), pdb_blocked="report", **kw):
    b = EvictionBook(D, T0, pdb_blocked, **kw)
    b.observe(list(pods), list(pdbs))
    return b


def names(actions):
    return [a.key.split("/")[1] for a in actions]


NO_INPUTS = Inputs()


def send(b, now, inputs=NO_INPUTS, slots=8):
    return b.next_actions(at(now), inputs, slots)


def uid(name, ns="default"):
    return f"uid-{ns}-{name}"


def test_one_eviction_at_a_time_per_pdb_and_uncovered_pods_in_parallel():
    b = book(WEB + [pod("solo")], WEB_PDB)
    actions, _ = send(b, T0)
    assert names(actions) == ["web-0", "solo"]
    assert names(send(b, T0)[0]) == []                      # web-0 still in flight
    emits = b.answer(uid("web-0"), Answer("accepted"), at(T0 + 0.1))
    assert [e.event for e in emits] == ["drain.evicted"]
    assert names(send(b, T0 + 0.1)[0]) == ["web-1"]


def test_a_blocked_pod_is_retried_with_backoff_and_its_lane_waits():
    b = book(WEB, WEB_PDB)
    send(b, T0)
    b.answer(uid("web-0"), Answer("blocked", "429", "web"), at(T0))
    st = b.states[uid("web-0")]
    assert (st.phase, st.attempts, st.pdb) == (RETRY, 1, "default/web")
    assert names(send(b, T0 + 0.05)[0]) == []                # not due, and web-1 would be blocked too
    assert names(send(b, T0 + 0.1)[0]) == ["web-0"]
    b.answer(uid("web-0"), Answer("blocked", "429", "web"), at(T0 + 0.1))
    assert b.states[uid("web-0")].retry_at == pytest.approx(T0 + 0.3)   # 0.1, 0.2, 0.4 ... at most 2 s


def test_backoff_never_exceeds_its_cap():
    st = PodState(phase="in_flight")
    for _ in range(20):
        st = transition(st, Answer("blocked"), T0)
        st = PodState(phase="in_flight", attempts=st.attempts)
    assert transition(st, Answer("blocked"), T0).retry_at == T0 + REFUSED_MAX_S


def test_critical_pods_wait_until_every_ordinary_lane_is_done_or_stuck():
    b = book([pod("app"), pod("dns", ns="kube-system", priority_class="system-node-critical")] + WEB, WEB_PDB)
    assert names(send(b, T0)[0]) == ["web-0", "app"]
    b.answer(uid("app"), Answer("accepted"), at(T0))
    assert names(send(b, T0)[0]) == []                       # the web lane is still busy
    b.answer(uid("web-0"), Answer("accepted"), at(T0))
    assert names(send(b, T0)[0]) == ["web-1"]
    b.answer(uid("web-1"), Answer("blocked", "429", "web"), at(T0))
    assert names(send(b, T0 + 0.05)[0]) == []                # a 429 is the PDB's pace, not a block
    t = T0 + 1.0                                             # the backoff's cap: always due again
    while t < T0 + STUCK_AFTER_S:                            # ... until it has refused for a while
        assert names(send(b, t)[0]) == ["web-1"]
        b.answer(uid("web-1"), Answer("blocked", "429", "web"), at(t))
        t += 1.0
    assert names(send(b, t)[0]) == ["web-1", "dns"]          # stuck: the critical tier may go


def test_pods_still_checkpointing_wait_for_their_ack_or_the_window_end():
    b = book([pod("ckpt"), pod("free")])
    held = Inputs(held=frozenset({uid("ckpt")}))
    assert names(send(b, T0, held)[0]) == ["free"]
    assert b.holding(T0, held)
    assert names(send(b, T0 + 1, held)[0]) == []
    assert names(send(b, T0 + 1, Inputs())[0]) == ["ckpt"]   # acked


def test_checkpoint_window_end_releases_every_pod():
    b = book([pod("ckpt")])
    everyone = Inputs(hold_all=True)
    assert names(send(b, T0 + 9.9, everyone)[0]) == []
    assert names(send(b, D.checkpoint_by, everyone)[0]) == ["ckpt"]
    assert not b.holding(D.checkpoint_by, everyone)


def test_report_at_the_cutoff_once_and_keep_retrying_politely():
    b = book(WEB[:1], WEB_PDB)
    send(b, T0)
    b.answer(uid("web-0"), Answer("blocked", "budget", "web"), at(T0 + 1))
    actions, emits = send(b, D.evict_at)
    assert names(actions) == ["web-0"] and actions[0].op == "evict"
    assert [e.event for e in emits] == ["drain.eviction_blocked"]
    data = emits[0].data
    assert (data["pod"], data["pdb"], data["attempts"]) == ("default/web-0", "default/web", 1)
    assert data["blocked_for_ms"] == round((D.evict_at - T0 - 1) * 1000)
    b.answer(uid("web-0"), Answer("blocked", "budget", "web"), at(D.evict_at))
    assert send(b, D.evict_at + 5)[1] == []                  # reported once only


def test_delete_at_the_cutoff_with_the_grace_left():
    b = book([pod("web-0", labels={"app": "web"}, grace=60)], WEB_PDB, pdb_blocked="delete")
    send(b, T0)
    b.answer(uid("web-0"), Answer("blocked", "budget", "web"), at(T0))
    actions, emits = send(b, D.evict_at)
    assert emits == [] and [(a.op, a.grace_s) for a in actions] == [("delete", 30)]   # cutoff T0+90
    emits = b.answer(uid("web-0"), Answer("accepted"), at(D.evict_at + 0.2))
    assert [e.event for e in emits] == ["drain.deleted"]
    assert emits[0].data["reason"] == "pdb_blocked" and emits[0].data["grace_s"] == 30


def test_the_verifiers_escalation_brings_the_cutoff_forward():
    b = book(WEB[:1], WEB_PDB, pdb_blocked="delete")
    send(b, T0)
    b.answer(uid("web-0"), Answer("blocked"), at(T0))
    assert send(b, T0 + 2)[0][0].op == "evict"
    b.answer(uid("web-0"), Answer("blocked"), at(T0 + 2))
    assert send(b, T0 + 3, Inputs(escalated=True))[0][0].op == "delete"


def test_after_the_cutoff_tiers_no_longer_wait_but_a_pdb_keeps_its_pace():
    """Under pdb_blocked=report the cutoff lifts the tiers, not the PDB's one eviction at a time
    (a refusal there changes nothing but the server's load); under delete every pod goes at once."""
    critical = [pod("dns", ns="kube-system", priority_class="system-node-critical")]
    b = book(WEB + critical, WEB_PDB)
    assert names(send(b, D.evict_at)[0]) == ["web-0", "dns"]
    b = book(WEB + critical, WEB_PDB, pdb_blocked="delete")
    assert names(send(b, D.evict_at)[0]) == ["web-0", "web-1", "web-2", "dns"]


def test_an_unreachable_server_is_retried_but_not_reported_as_a_pdb_block():
    b = book([pod("a")])
    send(b, T0)
    b.answer(uid("a"), Answer("unreachable", "refused"), at(T0))
    actions, emits = send(b, D.evict_at)
    assert names(actions) == ["a"] and emits == []


def test_gone_and_refused_pods_are_never_sent_again():
    b = book([pod("gone"), pod("replaced"), pod("elsewhere")])
    send(b, T0)
    assert b.answer(uid("gone"), Answer("gone"), at(T0)) == []
    assert b.answer(uid("replaced"), Answer("gone"), at(T0)) == []
    emits = b.answer(uid("elsewhere"), Answer("refused", "bound to node-b"), at(T0))
    assert [e.event for e in emits] == ["drain.error"]
    assert send(b, D.evict_at)[0] == []
    assert b.states[uid("gone")].phase == GONE


def test_nothing_evicted_before_a_restart_or_already_terminating_is_evicted_again():
    b = book([pod("done-before"), pod("terminating", terminating=True), pod("new")],
             evicted=frozenset({uid("done-before")}))
    assert names(send(b, T0)[0]) == ["new"]
    assert b.states[uid("done-before")].phase == ACCEPTED
    assert b.remaining() == ["default/done-before", "default/new", "default/terminating"]


def test_accepted_pods_count_until_they_are_gone_from_the_listing():
    b = book([pod("a")])
    send(b, T0)
    b.answer(uid("a"), Answer("accepted"), at(T0))
    assert not b.empty()
    b.observe([], [])
    assert b.empty() and b.states[uid("a")].phase == GONE


def test_at_most_slots_calls_in_flight():
    b = book([pod(f"p{i}") for i in range(20)])
    assert len(send(b, T0, slots=8)[0]) == 8
    assert len(send(b, T0, slots=8)[0]) == 0
    b.answer(uid("p0"), Answer("accepted"), at(T0))
    assert len(send(b, T0, slots=8)[0]) == 1


def test_the_evicted_event_says_when_and_with_what_grace():
    b = book([pod("a", grace=300)])
    actions, _ = send(b, T0 + 2)
    assert actions[0].grace_s == 88                          # cutoff T0+90
    (ev,) = b.answer(uid("a"), Answer("accepted"), at(T0 + 2.5))
    assert ev.data == {"pod": "default/a", "uid": uid("a"), "pdb": "", "since_received_ms": 2500,
                       "attempts": 1, "grace_s": 88}


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        EvictionBook(D, T0, "shrug")
    with pytest.raises(ValueError):
        Answer("maybe")


def test_a_pod_leaving_its_lane_wakes_the_pods_its_pdb_refused():
    b = book(WEB, WEB_PDB)
    (first,), _ = b.next_actions(at(T0), Inputs(), 8)
    b.answer(first.uid, Answer("accepted"), at(T0))
    (second,), _ = b.next_actions(at(T0), Inputs(), 8)
    for _ in range(6):   # refused again and again: the backoff grows to its cap
        b.answer(second.uid, Answer("blocked", "429", "web"), at(T0))
        b.states[second.uid] = dataclasses.replace(b.states[second.uid], phase="in_flight")
    b.answer(second.uid, Answer("blocked", "429", "web"), at(T0))
    assert b.states[second.uid].retry_at >= T0 + 1.0
    left = [p for p in WEB if p["metadata"]["uid"] != first.uid]
    b.observe(left, WEB_PDB, at(T0 + 0.5))   # the evicted pod is gone: its budget may allow the next
    assert b.states[second.uid].retry_at == pytest.approx(T0 + 0.5 + LANE_WAKE_S)


@pytest.mark.parametrize(("outcome", "detail"), [
    ("error", 'admission webhook "guard.example.com" denied the request: pods in prod may not be evicted'),
    ("error", "500 InternalError: This pod has more than one PodDisruptionBudget"),
    ("throttled", "Too many requests, please try again later."),
    ("unreachable", "HTTP 503"),
])
def test_pdb_blocked_delete_never_deletes_after_anything_but_a_pdb_refusal(outcome, detail):
    """pdb_blocked=delete bypasses budgets, not webhooks or a failing server: past the cutoff, a pod
    whose eviction was denied by a webhook, failed with a 500, was throttled or got no answer is
    evicted again (and an error reported), never DELETEd -- however long it goes on."""
    b = book(WEB[:1], WEB_PDB, pdb_blocked="delete")
    send(b, T0)
    b.answer(uid("web-0"), Answer(outcome, detail), at(T0 + 1))
    now, ops = D.evict_at, []
    for _ in range(40):
        actions, _ = send(b, now)
        ops += [a.op for a in actions]
        for a in actions:
            b.answer(a.uid, Answer(outcome, detail), at(now))
        now += 1.0
    assert ops and set(ops) == {"evict"}


def test_pdb_blocked_delete_follows_a_pdb_refusal_even_after_other_answers():
    """Between a PDB's 429s, a throttle does not undo what the 429 said; a webhook's denial as the
    last answer does (what stops that pod now is not its budget)."""
    b = book(WEB[:1], WEB_PDB, pdb_blocked="delete")
    send(b, T0)
    b.answer(uid("web-0"), Answer("blocked", "budget", "web"), at(T0))
    (a,) = send(b, T0 + 5)[0]
    b.answer(uid("web-0"), Answer("throttled", retry_after=1), at(T0 + 5))
    assert b.states[uid("web-0")].last == "blocked"
    (a,) = send(b, D.evict_at)[0]
    assert a.op == "delete"
    b2 = book(WEB[:1], WEB_PDB, pdb_blocked="delete")
    send(b2, T0)
    b2.answer(uid("web-0"), Answer("blocked", "budget", "web"), at(T0))
    (a,) = send(b2, T0 + 5)[0]                  # retried before the cutoff ...
    b2.answer(uid("web-0"), Answer("error", "admission webhook denied the request"), at(T0 + 5))
    actions, emits = send(b2, D.evict_at)       # ... and denied by a webhook: evicted again
    assert [x.op for x in actions] == ["evict"] and [e.event for e in emits] == ["drain.eviction_blocked"]


def test_no_eviction_version_is_refused_with_an_event_and_never_deleted():
    """An eviction the agent could not send (discovery lists no version it knows) is refused:
    one drain.eviction_unsupported for the pod, never sent again, never deleted at the cutoff."""
    b = book(WEB[:1], WEB_PDB, pdb_blocked="delete")
    send(b, T0)
    emits = b.answer(uid("web-0"), Answer("unsupported", "the server lists Eviction as policy/v2"), at(T0))
    assert [e.event for e in emits] == ["drain.eviction_unsupported"]
    assert emits[0].data["pod"] == "default/web-0" and "policy/v2" in emits[0].data["error"]
    assert send(b, D.evict_at)[0] == [] and send(b, D.cutoff)[0] == []
    assert b.remaining() == ["default/web-0"]     # it still counts: the verdict names it
