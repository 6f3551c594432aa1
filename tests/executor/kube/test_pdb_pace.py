"""A PDB's pace past the cutoff, and one PDB's room shared by drains on many nodes (the eviction
book, pure): driven by hand with the PDB's watched status, no server, no threads, no clock."""
from __future__ import annotations

import dataclasses
import random
from typing import Any

from common.wire import Budget, phase_ends
from executor.kube import pacing
from executor.kube.book_records import Inputs
from executor.kube.budget_gate import status_of
from executor.kube.eviction_book import STUCK_AFTER_S, EvictionBook
from executor.kube.pdb_share import PROBE_QUIET_S
from executor.kube.pod_state import Answer
from tests.executor.kube.podspecs import pod
from tests.support.clocks import at

T0 = 1000.0
D = phase_ends(T0, T0 + 100, Budget(budget_s=70, checkpoint_s=10, evict_s=50, margin_s=10))
CUT = D.evict_at
WEB = "default/web"


def web_pdb(allowed: int, disrupted: tuple[str, ...] = (), rv: int = 1) -> dict[str, Any]:
    status: dict[str, Any] = {"disruptionsAllowed": allowed, "observedGeneration": 1,
                              "currentHealthy": 10, "desiredHealthy": 5}
    if disrupted:
        status["disruptedPods"] = dict.fromkeys(disrupted, "2030-01-01T00:00:00Z")
    return {"metadata": {"name": "web", "namespace": "default", "generation": 1, "resourceVersion": str(rv)},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}, "status": status}


def web_pods(node: str, n: int) -> list[dict[str, Any]]:
    pods = [pod(f"{node}-web-{i}", node=node, labels={"app": "web"}) for i in range(n)]
    for p in pods:   # Ready: eviction.go consults the budget (an unready pod of a healthy one goes free)
        p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return pods


class Drain:
    """One node's book, fed the shared PDB's watched status."""

    def __init__(self, node: str, pods: int, pdb_blocked: str = "report", seed: int | None = None) -> None:
        rand = random.Random(seed).random if seed is not None else (lambda: 0.0)
        self.pods = web_pods(node, pods)
        self.book = EvictionBook(D, T0, pdb_blocked, rand=rand)

    def see(self, pdb: dict[str, Any], now: float) -> None:
        left = [p for p in self.pods if self.book.states.get(p["metadata"]["uid"]) is None
                or self.book.states[p["metadata"]["uid"]].phase != "gone"]
        self.book.observe(left, [pdb], at(now), {WEB: status_of(pdb)})

    def send(self, now: float) -> list[Any]:
        actions, self.emits = self.book.next_actions(at(now), Inputs(), 8)
        return actions


def test_past_the_cutoff_a_pdb_with_room_1_gets_one_eviction_in_flight():
    d = Drain("n1", 5)
    d.see(web_pdb(1), CUT)
    (first,) = d.send(CUT)                     # before the change: all five at once
    assert d.send(CUT) == []                   # in flight: the lane waits
    d.book.answer(first.uid, Answer("accepted"), at(CUT + 0.1))
    d.see(web_pdb(1), CUT + 0.1)               # the watch has not caught up: room is 1 - 1 taken
    assert d.send(CUT + 0.1) == []
    d.see(web_pdb(1, disrupted=(first.key.split("/")[1],), rv=2), CUT + 0.3)   # room again
    assert [a.op for a in d.send(CUT + 0.3)] == ["evict"]


def test_past_the_cutoff_a_budget_without_room_is_reported_not_sent_and_asked_when_its_watch_is_quiet():
    d = Drain("n1", 3)
    d.see(web_pdb(0), CUT)
    assert d.send(CUT) == [] and d.emits == []          # no room: pace, not yet a block
    assert d.send(CUT + STUCK_AFTER_S - 0.1) == []
    assert d.send(CUT + STUCK_AFTER_S) == []             # stuck: every pod reported, none sent
    assert sorted(e.data["pod"] for e in d.emits if e.event == "drain.eviction_blocked") == [
        "default/n1-web-0", "default/n1-web-1", "default/n1-web-2"]
    assert all(e.data["blocked_for_ms"] == STUCK_AFTER_S * 1000 for e in d.emits)
    assert d.book.next_due(CUT + STUCK_AFTER_S) == CUT + PROBE_QUIET_S
    (probe,) = d.send(CUT + PROBE_QUIET_S)               # the status stood still 10 s: the server is asked
    assert d.emits == []                                 # reported once
    d.book.answer(probe.uid, Answer("blocked", "429", "web"), at(CUT + PROBE_QUIET_S))
    assert d.send(CUT + PROBE_QUIET_S + pacing.REFUSED_MAX_S * 1.25) == []     # not at the backoff ...
    assert [a.uid for a in d.send(CUT + 2 * PROBE_QUIET_S)] == [probe.uid]    # ... one a quiet period


def test_past_the_cutoff_a_budget_whose_watched_status_moves_is_not_asked():
    """A live watch showing no room is what the server would answer: nothing is sent to hear it."""
    d = Drain("n1", 3)
    for i in range(30):
        pdb = web_pdb(0, rv=i + 1)
        pdb["status"]["currentHealthy"] = 10 - i % 2    # the controller writes it again and again
        d.see(pdb, CUT + i)
        assert d.send(CUT + i) == []


def test_under_pdb_blocked_delete_a_refusal_past_the_cutoff_still_deletes():
    d = Drain("n1", 3, pdb_blocked="delete")
    d.see(web_pdb(0), CUT)
    actions = d.send(CUT)
    assert [a.op for a in actions] == ["evict"] * 3
    for a in actions:
        d.book.answer(a.uid, Answer("blocked", "429", "web"), at(CUT))
    assert [a.op for a in d.send(CUT + 0.01)] == ["delete"] * 3


def test_a_refusal_backs_off_with_jitter_and_a_share_of_the_room():
    """After a PDB refusal a drain sends for that PDB with probability room / 2**refusals, and a
    lane that drew 'not now' waits a refusal backoff drawn by its own book."""
    waits = []
    for seed in (1, 2, 3):
        d = Drain("n1", 2, seed=seed)
        d.see(web_pdb(1), T0)
        (a,) = d.send(T0)
        for _ in range(3):   # three drains' worth of refusals: a share of 1/8
            d.book.answer(a.uid, Answer("blocked", "429", "web"), at(T0))
            d.book.states[a.uid] = dataclasses.replace(d.book.states[a.uid], phase="in_flight")
        d.book.answer(a.uid, Answer("blocked", "429", "web"), at(T0))
        t, sent_at = T0 + 5.0, None
        d.see(web_pdb(1, rv=2), t)
        while sent_at is None and t < T0 + 60:
            if d.send(t):
                sent_at = t
            else:
                due = d.book.next_due(t)
                assert due is not None and due > t     # it says when to look again
                waits.append(round(due - t, 4))
                t = due
        assert sent_at is not None                     # the share is never 0
    assert len(waits) >= 3 and len(set(waits)) == len(waits)   # decorrelated: no two the same


def _hall(drains: list[Drain], room_per_round: int, rounds: int, step_s: float) -> list[tuple[int, int]]:
    """``drains`` sharing one PDB; each round the budget has ``room_per_round`` again (the
    disruption controller saw the evicted pods go), every book sees it and sends what it will;
    the server accepts up to the room and refuses the rest. (sent, accepted) per round."""
    rng = random.Random(7)
    taken: list[str] = []
    out = []
    t = CUT + 0.5
    for r in range(rounds):
        pdb = web_pdb(room_per_round, disrupted=tuple(taken), rv=r + 2)
        sent = []
        for d in drains:
            d.see(pdb, t)
            sent += [(d, a) for a in d.send(t)]
        rng.shuffle(sent)
        room, accepted = room_per_round, 0
        for d, a in sent:
            if room > 0:
                room -= 1
                accepted += 1
                taken.append(a.key.split("/")[1])
                d.book.answer(a.uid, Answer("accepted"), at(t + 0.05), rng.random())
            else:   # each retry's backoff jittered by its own draw, as the runner does
                d.book.answer(a.uid, Answer("blocked", "429", "web"), at(t + 0.05), rng.random())
        out.append((len(sent), accepted))
        t += step_s
    return out


def test_drains_sharing_one_pdb_send_about_its_room_not_one_each():
    """40 nodes' drains, one PDB with room 2 a round: after the first round, which nobody can
    foresee, a round sees a few sends, not 40 (the refusals each costs the server); the room is
    still used."""
    drains = [Drain(f"n{i}", 3, seed=i) for i in range(40)]
    rounds = _hall(drains, room_per_round=2, rounds=40, step_s=0.5)
    assert rounds[0][0] == 40
    later = rounds[5:]
    # O(room) a round: before, with the jittered backoff alone (retries spread over 2 s), 10.5 a
    # round for a room of 2 (seeds 0-400: 3.5-4.3 now, 80-90 % of the room used).
    assert sum(s for s, _ in later) / len(later) <= 2.5 * 2
    assert sum(a for _, a in later) >= 0.5 * 2 * len(later)         # and the room is used


def test_room_appearing_in_the_watched_status_rearms_a_refused_lane_at_once():
    d = Drain("n1", 3)
    d.see(web_pdb(1), T0)
    (a,) = d.send(T0)
    for _ in range(6):   # refused again and again: its backoff grows to the cap
        d.book.answer(a.uid, Answer("blocked", "429", "web"), at(T0))
        assert [x.uid for x in d.send(d.book.states[a.uid].retry_at)] == [a.uid]
    d.book.answer(a.uid, Answer("blocked", "429", "web"), at(T0 + 1))
    d.see(web_pdb(0, rv=2), T0 + 1.1)
    assert d.book.states[a.uid].retry_at >= T0 + 1 + pacing.REFUSED_MAX_S
    d.see(web_pdb(1, rv=3), T0 + 1.2)                                # room appeared
    assert [x.uid for x in d.send(T0 + 1.2 + pacing.LANE_WAKE_S)] == [a.uid]


def test_a_retry_its_budget_holds_back_does_not_wake_the_drain_until_something_changes():
    """A refused pod falls due while the watched budget has no room: the book sends nothing, and
    the next moment it names is ahead (before: the past retry time, and the drain's loop polled
    with timeout 0 until the next listing -- a core's worth of spinning per agent)."""
    d = Drain("n1", 2)
    d.see(web_pdb(1), T0)
    (a,) = d.send(T0)
    d.book.answer(a.uid, Answer("blocked", "429", "web"), at(T0))     # due again at T0 + 0.1
    d.see(web_pdb(0, rv=2), T0 + 0.05)                                # no room
    assert d.send(T0 + 0.2) == []
    due = d.book.next_due(T0 + 0.2)
    assert due is None or due > T0 + 0.2
