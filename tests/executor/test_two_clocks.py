"""Two clocks (issue 26, point 8): the wall clock stepped 60 s back and forward during a drain, in
the pure cores -- the executor's drain core, the eviction book and its pacing, the verifier's
core -- and nothing stalls or ends early. Deadlines stay wall-clock epochs; every interval runs
on the monotonic clock, which a step does not move.

Each test drives the core with both clocks (``tests.support.clocks.at``): ``mono`` advances as
time really passes, ``wall`` jumps. On main (before the clocks were split) each one fails: the
interval was measured on the wall clock.
"""
from __future__ import annotations

import io
from typing import Any

import pytest

from common.contract import BUILTIN
from common.log import Logger
from common.notice import notice_time
from common.wire import Budget, DrainRecord, DrainState, phase_ends
from executor.drain import SAVE_EVERY_S, TELL_CLIENTS_AFTER_S, Drains
from executor.kube.book_records import Inputs
from executor.kube.eviction_book import STUCK_AFTER_S, EvictionBook
from executor.kube.pacing import REFUSED_MAX_S, THROTTLE_MAX_S
from executor.kube.pod_state import Answer
from executor.scheduler import InPhase, Order, Report, Withdrawal
from tests.executor.kube.podspecs import pdb, pod
from tests.support.clocks import at
from tests.support.drain_records import record
from tests.support.notices import notice
from verifier import core
from verifier.judge import VERIFY_WAIT_S, Observation

T0 = 1_800_000_000.0
STEP = 60.0
VERDICTS = ("drain.done", "drain.overrun", "drain.unverified")


# -- the executor's drain core -----------------------------------------------------------------
class Scheduler:
    """Never cordons; reports a phase change whenever asked (progress the core must save)."""

    def __init__(self) -> None:
        self.turns = 0

    def advance(self, order: Order, now: float) -> None:
        pass

    def withdraw(self, w: Withdrawal, now: float) -> None:
        pass

    def reports(self) -> list[Report]:
        self.turns += 1
        return [InPhase("n1", "evict" if self.turns % 2 else "checkpoint")]

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


class Clients:
    def __init__(self) -> None:
        self.announced: list[dict[str, Any]] = []

    def announce(self, notice: dict[str, Any]) -> None:
        self.announced.append(notice)

    def count(self) -> int:
        return 1

    def tell(self) -> None:
        pass

    def acks(self) -> list[Any]:
        return []

    def holds(self, notice_id: str) -> tuple[frozenset[str], bool]:
        return frozenset(), False

    def extended(self) -> dict[str, float]:
        return {}

    def withdraw(self, notice_id: str) -> None:
        pass


class Shell:
    def __init__(self) -> None:
        self.log = Logger("executor", stream=io.StringIO())
        self.saves = 0

    def emit(self, type: str, notice_id: str, data: dict[str, Any], now: float) -> object:
        return None

    def save(self) -> None:
        self.saves += 1

    def publish(self) -> None:
        pass


def drain_core() -> tuple[Drains, Clients, Shell]:
    clients, shell = Clients(), Shell()
    d = Drains(Scheduler(), clients, shell, {})   # duck-typed fakes
    d.contract, d.contract_heard = BUILTIN, True
    n = notice("n1", now=T0, deadline_in=600.0, received_in=0.0)
    d.active = {n.id: n}
    return d, clients, shell


@pytest.mark.parametrize("step", [-STEP, STEP])
def test_the_clients_are_told_two_seconds_after_the_notice_whatever_the_wall_clock_does(step):
    """The scheduler never cordons: the clients hear the notice TELL_CLIENTS_AFTER_S after it
    came, not 62 s later (stepped back) nor at once (stepped ahead)."""
    d, clients, _ = drain_core()
    d.turn(T0, 100.0)
    assert d.records["n1"].state == DrainState.RUNNING and clients.announced == []
    d.turn(T0 + step + 0.5, 100.5)                       # the wall clock jumps here
    assert clients.announced == []
    d.turn(T0 + step + TELL_CLIENTS_AFTER_S + 0.1, 100.0 + TELL_CLIENTS_AFTER_S + 0.1)
    assert len(clients.announced) == 1


def test_progress_is_saved_every_save_interval_after_the_wall_clock_steps_back():
    d, _, shell = drain_core()
    d.turn(T0, 100.0)
    d.on_reports(T0, 100.0)
    before = shell.saves
    mono = 100.0
    for i in range(1, 11):                                  # 1 s of turns, 0.1 s apart
        mono = 100.0 + i * 0.1
        d.on_reports(T0 - STEP + i * 0.1, mono)
    assert shell.saves - before >= int(1.0 / SAVE_EVERY_S) - 1


# -- the eviction book and its pacing ----------------------------------------------------------
# Long phases: the checkpoint ends at T0 + 10, the order is lifted at T0 + 400, node empty by T0 + 590.
ENDS = phase_ends(T0, T0 + 600, Budget(budget_s=600, checkpoint_s=10, evict_s=390, margin_s=10))


def test_a_pdb_refusal_is_retried_within_its_backoff_after_the_wall_clock_steps_back():
    b = EvictionBook(ENDS, T0, "report")
    b.observe([pod("web-0", labels={"app": "web"})], [pdb("web", {"app": "web"})])
    (a,), _ = b.next_actions(at(T0 + 20, 20.0), Inputs(), 8)
    b.answer(a.uid, Answer("blocked", "budget", "web"), at(T0 + 20, 20.0))
    # The wall clock steps back 60 s; the monotonic one goes on: the retry is due within 2 s.
    actions, _ = b.next_actions(at(T0 + 20 - STEP + REFUSED_MAX_S * 1.3, 20.0 + REFUSED_MAX_S * 1.3), Inputs(), 8)
    assert [x.uid for x in actions] == [a.uid]


def test_a_throttled_book_sends_again_after_retry_after_when_the_wall_clock_steps_back():
    b = EvictionBook(ENDS, T0, "report")
    b.observe([pod("solo")], [])
    (a,), _ = b.next_actions(at(T0 + 20, 20.0), Inputs(), 8)
    b.answer(a.uid, Answer("throttled", retry_after=1.0), at(T0 + 20, 20.0))
    assert b.next_actions(at(T0 + 20.5 - STEP, 20.5), Inputs(), 8)[0] == []     # still throttled
    later = 20.0 + THROTTLE_MAX_S * 1.6
    assert [x.uid for x in b.next_actions(at(T0 + 20 - STEP + later - 20.0, later), Inputs(), 8)[0]] == [a.uid]


def test_a_wall_clock_stepped_ahead_does_not_make_a_blocked_lane_stuck_at_once():
    """Tier 1 (system-critical) waits until the ordinary lanes are done or stuck -- stuck meaning
    refused for STUCK_AFTER_S. A wall clock 60 s ahead must not make that happen at once."""
    b = EvictionBook(ENDS, T0, "report")
    dns = pod("dns", ns="kube-system", priority_class="system-node-critical")
    b.observe([pod("web-0", labels={"app": "web"}), dns], [pdb("web", {"app": "web"})])
    (a,), _ = b.next_actions(at(T0 + 20, 20.0), Inputs(), 8)
    assert a.key == "default/web-0"
    b.answer(a.uid, Answer("blocked", "budget", "web"), at(T0 + 20, 20.0))
    sent: dict[str, float] = {}
    mono = 20.25
    while mono < 20.0 + STUCK_AFTER_S + REFUSED_MAX_S * 1.3:   # the wall clock is 60 s ahead now
        for x in b.next_actions(at(T0 + STEP + mono, mono), Inputs(), 8)[0]:
            sent.setdefault(x.key, mono)
            if x.key != "kube-system/dns":
                b.answer(x.uid, Answer("blocked", "budget", "web"), at(T0 + STEP + mono, mono))
        mono += 0.25
    # Refused for STUCK_AFTER_S (monotonic) before tier 1 goes: not at the first turn after the step.
    assert sent["kube-system/dns"] >= 20.0 + STUCK_AFTER_S


def test_deadlines_stay_on_the_wall_clock():
    """The order is lifted at the wall-clock cutoff, whatever the monotonic clock says."""
    b = EvictionBook(ENDS, T0, "report")
    b.observe([pod("a"), pod("b")], [])
    assert not b.past_evict_cutoff(notice_time(ENDS.evict_at - 1, "t"), Inputs())
    assert b.past_evict_cutoff(notice_time(ENDS.evict_at, "t"), Inputs())


# -- the verifier's core -----------------------------------------------------------------------
def test_a_wall_clock_stepped_ahead_does_not_cut_the_verifiers_wait_for_its_own_read():
    """The executor reports the node empty; the wall clock then jumps 60 s ahead, past the cutoff.
    The verdict still waits VERIFY_WAIT_S (monotonic) for the verifier's own read, which agrees:
    done -- not 'unverified: no read since the report'."""
    budget = Budget(budget_s=25, checkpoint_s=5, evict_s=15, margin_s=5)
    n = notice("n1", now=T0, deadline_in=30.0, received_in=0.0)
    rec: DrainRecord = record(n, budget=budget, state="done", remaining=[],
                              steps={"cordoned": T0 + 1, "node_empty": T0 + 20})
    state = core.normalize({})
    view = core.View(active={"n1": n}, progress={"n1": rec}, progress_at=T0 + 20, budget=budget,
                     mono=500.0, done_heard={"n1": 500.0})
    core.advance(state, view, T0 + 1)
    stepped = core.View(active={"n1": n}, progress={"n1": rec}, progress_at=T0 + 20, budget=budget,
                        mono=500.5, done_heard={"n1": 500.0}, seen=None)
    emits, _ = core.advance(state, stepped, T0 + 20.5 + STEP)
    assert [e.type for e in emits if e.type in VERDICTS] == []     # still waiting (escalation is by the deadline)
    agrees = core.View(active={"n1": n}, progress={"n1": rec}, progress_at=T0 + 20, budget=budget,
                       mono=501.5, done_heard={"n1": 500.0}, seen=Observation(T0 + 21 + STEP, True, ()))
    emits, _ = core.advance(state, agrees, T0 + 21.5 + STEP)
    assert [e.type for e in emits if e.type in VERDICTS] == ["drain.done"]
    assert VERIFY_WAIT_S > 1.5


def test_a_restarted_executor_tells_the_clients_of_a_drain_it_finds_on_disk_at_once():
    """The 2 s are counted from this process's first sight of the notice -- but a drain an earlier
    run started (its record on disk) is not made to wait again."""
    d, clients, _ = drain_core()
    d.turn(T0, 100.0)
    again = Drains(Scheduler(), clients, Shell(), dict(d.records))
    again.contract, again.contract_heard, again.active = BUILTIN, True, dict(d.active)
    again.turn(T0 + 0.5, 7.0)          # a new process: its monotonic clock starts elsewhere
    assert len(clients.announced) == 1
