"""Issue 28, point 2, in the drain core (executor.drain, executor.governing): when the drain starts,
per notice kind (DESIGN section 9). A deferred notice (the contract's start ``deadline_minus_budget``)
wants the node cordoned until ``deadline - budget_s``, then drained; a cordon-only one the cordon and
nothing more. With several notices at once (issue 26): a reclaim still governs and drains at once, its
withdrawal leaves the node cordoned for the other notice and stops its evictions; cancels before,
at and after the start; an executor restarted between the cordon and the start."""
from __future__ import annotations

from typing import Any

import pytest

from common.contract import BUILTIN, Contract
from common.timefmt import format_rfc3339
from common.wire import DrainState, Step, decode_records, encode_records
from executor.drain import Drains
from executor.drain_start import want_of
from executor.governing import Want
from executor.scheduler import NewState, Remaining, Remember, StepDone
from tests.executor.test_drain_core import FakeShell
from tests.executor.test_many_notices import WithdrawingScheduler
from tests.support.drain_records import record
from tests.support.notices import notice

T0 = 1_800_000_000.0
BUDGET_S = BUILTIN.drain.budget_s          # 25 s: the built-in contract's
MAINT_DEADLINE_IN = 600.0
STARTS_AT = T0 + MAINT_DEADLINE_IN - BUDGET_S   # the maintenance's drain starts here (built-in contract)
CORDON_ONLY = Contract.from_payload({**BUILTIN.to_dict(), "kinds": {"maintenance": "cordon"}})


class FakeClients:
    """The agent socket as the core sees it: who was announced what."""

    def __init__(self) -> None:
        self.announced: list[dict[str, Any]] = []
        self.withdrawn: list[str] = []

    def announce(self, message: dict[str, Any]) -> None:
        self.announced.append(message)

    def tell(self) -> None:
        pass

    def count(self) -> int:
        return 1

    def withdraw(self, notice_id: str) -> None:
        self.withdrawn.append(notice_id)

    def holds(self, notice_id: str) -> tuple[frozenset[str], bool]:
        return frozenset(), False

    def extended(self) -> dict[str, float]:
        return {}

    def acks(self) -> list[Any]:
        return []


def setup(contract: Contract = BUILTIN, records: dict | None = None):
    sched, shell, clients = WithdrawingScheduler(), FakeShell(), FakeClients()
    d = Drains(sched, clients, shell, records or {})   # type: ignore[arg-type]
    d.contract, d.contract_heard = contract, True
    maint = notice("maint", "maintenance", deadline_in=MAINT_DEADLINE_IN, now=T0)
    return d, sched, shell, clients, maint


def cordoned(d: Drains, sched: WithdrawingScheduler, nid: str, at: float) -> None:
    """The scheduler did what a cordon-only order asks: cordoned, and said the order is done."""
    sched.pending = [StepDone(nid, Step.CORDONED, "drain.cordoned"), NewState(nid, DrainState.CORDONED_ONLY)]
    d.on_reports(at, at)


def events(shell: FakeShell, type_: str) -> list[tuple[str, dict[str, Any]]]:
    return [(n, data) for t, n, data in shell.events if t == type_]


def waiting_maintenance(contract: Contract = BUILTIN):
    d, sched, shell, clients, maint = setup(contract)
    d.active = {maint.id: maint}
    d.turn(T0 + 0.1, T0 + 0.1)
    cordoned(d, sched, maint.id, T0 + 0.3)
    return d, sched, shell, clients, maint


# -- one deferred notice ---------------------------------------------------------------------

def test_want_of_a_deferred_drain_is_the_cordon_until_its_start():
    n = notice("m", "maintenance", deadline_in=600, now=T0)
    rec = record(n, drain_start="deadline_minus_budget")
    assert want_of(rec) == Want.CORDON and rec.begins_at(n.deadline) == n.deadline - rec.budget.budget_s
    rec.steps[Step.DEFERRED_STARTED] = STARTS_AT
    assert want_of(rec) == Want.DRAIN
    assert want_of(record(n)) == Want.DRAIN                         # at once
    assert want_of(record(n, policy="cordon")) == Want.CORDON       # cordon only, ever


def test_a_deferred_maintenance_is_cordoned_at_once_and_waits_for_its_start():
    """The order is cordon-only; the cordon done, the record waits (not running, still marking the
    node); no order, no client told, nothing moved until deadline - budget_s."""
    d, sched, shell, clients, maint = waiting_maintenance()
    (o,) = sched.orders
    assert o.cordon_only and o.notice_id == maint.id
    (started,) = events(shell, "drain.started")
    assert started[1]["start"] == "deadline_minus_budget" and started[1]["starts_at"] == format_rfc3339(STARTS_AT)
    rec = d.records[maint.id]
    assert rec.state == DrainState.WAITING and want_of(rec) == Want.CORDON
    for t in (T0 + 1, T0 + 300, STARTS_AT - 0.5):
        d.turn(t, t)
    assert len(sched.orders) == 1 and clients.announced == []
    assert d.service.governing is None and d.service.marking == frozenset({maint.id})
    assert events(shell, "drain.deferred_started") == []


def test_at_its_start_a_deferred_drain_drains_timed_from_its_start():
    d, sched, shell, clients, maint = waiting_maintenance()
    d.turn(STARTS_AT + 0.2, STARTS_AT + 0.2)
    rec = d.records[maint.id]
    assert rec.state == DrainState.RUNNING and rec.steps[Step.DEFERRED_STARTED] == STARTS_AT + 0.2
    (ev,) = events(shell, "drain.deferred_started")
    assert ev[1]["starts_at"] == format_rfc3339(STARTS_AT) and ev[1]["late_ms"] == 200 and ev[1]["waited"]
    o = sched.orders[-1]
    assert not o.cordon_only and Step.CORDONED in o.steps_done
    # Its phases run from its start, not from its receipt days before.
    assert o.ends.checkpoint_by == STARTS_AT + BUILTIN.drain.checkpoint_s
    assert o.ends.cutoff == maint.deadline - BUILTIN.drain.margin_s
    (told,) = clients.announced
    assert told["id"] == maint.id and told["checkpoint_by"] == format_rfc3339(STARTS_AT + BUILTIN.drain.checkpoint_s)
    d.turn(STARTS_AT + 1, STARTS_AT + 1)
    assert len(events(shell, "drain.deferred_started")) == 1   # once


def test_a_start_that_came_while_its_cordon_was_made_runs_on():
    """The cordon-only order's end reported after the start came: the record runs on, not waits."""
    d, sched, _, _, maint = setup()
    d.active = {maint.id: maint}
    d.turn(T0 + 0.1, T0 + 0.1)
    d.turn(STARTS_AT, STARTS_AT)   # the cordon was slow (an API server down for ten minutes)
    cordoned(d, sched, maint.id, STARTS_AT + 0.1)
    assert d.records[maint.id].state == DrainState.RUNNING
    d.turn(STARTS_AT + 0.2, STARTS_AT + 0.2)
    assert not sched.orders[-1].cordon_only


def test_a_deferred_notice_past_its_start_on_arrival_drains_at_once():
    d, sched, shell, _, _ = setup()
    late = notice("late", "maintenance", deadline_in=20, now=T0)   # less than the budget left
    d.active = {late.id: late}
    d.turn(T0 + 0.1, T0 + 0.1)
    assert not sched.orders[-1].cordon_only
    assert events(shell, "drain.deferred_started")[0][1]["waited"] is False


# -- a cordon-only notice --------------------------------------------------------------------

def test_a_cordon_only_notice_never_moves_work():
    d, sched, shell, clients, maint = waiting_maintenance(CORDON_ONLY)
    assert d.records[maint.id].state == DrainState.CORDONED_ONLY
    for t in (STARTS_AT, maint.deadline - 1):
        d.turn(t, t)
    assert [o.cordon_only for o in sched.orders] == [True] and clients.announced == []
    assert events(shell, "drain.deferred_started") == []


# -- many notices at once (issue 26) ----------------------------------------------------------

def test_a_reclaim_behind_a_cordon_only_or_waiting_notice_drains_at_once_and_withdrawn_leaves_the_cordon():
    for contract, state in ((CORDON_ONLY, DrainState.CORDONED_ONLY), (BUILTIN, DrainState.WAITING)):
        d, sched, _, _, maint = waiting_maintenance(contract)
        reclaim = notice("reclaim", "reclaim", deadline_in=42, now=T0 + 2)
        d.active = {maint.id: maint, reclaim.id: reclaim}
        d.turn(T0 + 2.1, T0 + 2.1)
        o = sched.orders[-1]
        assert (o.notice_id, o.cordon_only) == (reclaim.id, False)
        assert d.service.served == (reclaim.id,) and d.service.marking == frozenset({maint.id, reclaim.id})
        # Withdrawn: its evictions stop (no order any more), the node stays cordoned for the maintenance.
        d.active, d.withdrawn = {maint.id: maint}, frozenset({reclaim.id})
        n_orders = len(sched.orders)
        d.turn(T0 + 5, T0 + 5)
        (w,) = sched.withdrawals
        assert (w.notice_id, w.others_active, w.keep) == (reclaim.id, True, frozenset({maint.id}))
        assert w.marker is not None and w.marker.notice_id == maint.id
        assert len(sched.orders) == n_orders and d.records[maint.id].state == state


@pytest.mark.parametrize("reclaim_deadline_in", [30.0, 90.0])
def test_a_deferred_start_that_comes_while_a_reclaim_drains_joins_that_drain(reclaim_deadline_in):
    """The earlier deadline governs: a reclaim due first keeps the drain and serves the maintenance;
    one due after it hands the drain over, which goes on from where it was (its memory too)."""
    d, sched, shell, _, maint = waiting_maintenance()
    reclaim = notice("reclaim", "reclaim", deadline_in=reclaim_deadline_in, now=STARTS_AT - 10)
    first, second = (reclaim, maint) if reclaim.deadline < maint.deadline else (maint, reclaim)
    d.active = {maint.id: maint, reclaim.id: reclaim}
    d.turn(STARTS_AT - 9, STARTS_AT - 9)
    sched.pending = [StepDone(reclaim.id, Step.CORDONED, "drain.cordoned"), Remaining(reclaim.id, ("default/db-0",)),
                     Remember(reclaim.id, {"evicted": {"u1": "default/a"}})]
    d.on_reports(STARTS_AT - 8, STARTS_AT - 8)
    d.turn(STARTS_AT + 0.1, STARTS_AT + 0.1)
    o = sched.orders[-1]
    assert (o.notice_id, o.cordon_only) == (first.id, False) and d.service.served == (first.id, second.id)
    assert o.memo == {"evicted": {"u1": "default/a"}}   # nothing evicted twice
    assert d.records[maint.id].state == DrainState.RUNNING and d.records[maint.id].remaining == ["default/db-0"]
    assert len(events(shell, "drain.deferred_started")) == 1
    sched.pending = [Remaining(first.id, ()), StepDone(first.id, Step.NODE_EMPTY, "drain.node_empty"),
                     NewState(first.id, DrainState.DONE)]
    d.on_reports(STARTS_AT + 3, STARTS_AT + 3)
    assert {n: r.state for n, r in d.records.items()} == {maint.id: "done", reclaim.id: "done"}


def test_a_waiting_notice_does_not_end_with_a_drain_it_did_not_start():
    """A reclaim drains and empties the node while the maintenance waits: the maintenance's drain
    is still to come (it starts at its own time), not "done" along with the reclaim's."""
    d, sched, _, _, maint = setup()
    reclaim = notice("reclaim", "reclaim", deadline_in=42, now=T0)
    d.active = {reclaim.id: reclaim}
    d.turn(T0 + 0.1, T0 + 0.1)
    sched.pending = [StepDone(reclaim.id, Step.CORDONED, "drain.cordoned")]
    d.on_reports(T0 + 0.2, T0 + 0.2)
    d.active = {maint.id: maint, reclaim.id: reclaim}   # the maintenance arrives during the reclaim's drain
    d.turn(T0 + 1, T0 + 1)
    assert d.records[maint.id].state == DrainState.WAITING   # the node is cordoned: all it wants now
    sched.pending = [StepDone(reclaim.id, Step.NODE_EMPTY, "drain.node_empty"), NewState(reclaim.id, DrainState.DONE)]
    d.on_reports(T0 + 5, T0 + 5)
    assert d.records[maint.id].state == DrainState.WAITING and Step.NODE_EMPTY not in d.records[maint.id].steps


# -- cancels at every moment ---------------------------------------------------------------------

def withdraw(d: Drains, nid: str, at: float) -> None:
    d.active = {k: v for k, v in d.active.items() if k != nid}
    d.withdrawn = d.withdrawn | {nid}
    d.turn(at, at)


def test_cancelled_before_its_start_the_cordon_is_undone_and_it_never_starts():
    d, sched, shell, clients, maint = waiting_maintenance()
    withdraw(d, maint.id, T0 + 60)
    (w,) = sched.withdrawals
    assert (w.notice_id, w.others_active) == (maint.id, False) and Step.CORDONED in w.steps_done
    sched.pending = [NewState(maint.id, DrainState.WITHDRAWN)]
    d.on_reports(T0 + 61, T0 + 61)
    d.turn(STARTS_AT + 1, STARTS_AT + 1)
    assert d.records[maint.id].state == DrainState.WITHDRAWN and events(shell, "drain.deferred_started") == []
    assert [o.cordon_only for o in sched.orders] == [True] and clients.announced == []


def test_cancelled_right_at_its_start_it_never_starts():
    """The cancel and the start in the same turn: the cancel wins, nothing is moved."""
    d, sched, shell, _, maint = waiting_maintenance()
    withdraw(d, maint.id, STARTS_AT)
    assert events(shell, "drain.deferred_started") == [] and [o.cordon_only for o in sched.orders] == [True]
    assert [w.notice_id for w in sched.withdrawals] == [maint.id]


def test_cancelled_during_its_drain_it_is_stopped_and_undone():
    d, sched, _, clients, maint = waiting_maintenance()
    d.turn(STARTS_AT, STARTS_AT)
    assert not sched.orders[-1].cordon_only
    withdraw(d, maint.id, STARTS_AT + 3)
    (w,) = sched.withdrawals
    assert (w.notice_id, w.others_active) == (maint.id, False) and clients.withdrawn == [maint.id]


# -- an executor restarted between the cordon and the start ---------------------------------------

def restarted(d: Drains, maint):
    """A new executor on what the old one saved (executor.json's codec)."""
    records, refused = decode_records(encode_records(d.records))
    assert refused == {}
    d2, sched2, shell2, clients2, _ = setup(records=records)
    d2.active = {maint.id: maint}
    return d2, sched2, shell2, clients2


def test_a_restart_between_the_cordon_and_the_start_neither_starts_early_nor_forgets():
    d, _, _, _, maint = waiting_maintenance()
    d2, sched2, shell2, clients2 = restarted(d, maint)
    assert d2.records[maint.id].state == DrainState.WAITING and d2.records[maint.id].deferred
    for t in (T0 + 100, STARTS_AT - 0.1):
        d2.turn(t, t)
    assert sched2.orders == [] and clients2.announced == [] and events(shell2, "drain.started") == []
    d2.turn(STARTS_AT + 0.1, STARTS_AT + 0.1)
    assert [o.cordon_only for o in sched2.orders] == [False] and len(events(shell2, "drain.deferred_started")) == 1
    # Restarted again once started: it carries on draining, and is not started a second time.
    d3, sched3, shell3, _ = restarted(d2, maint)
    d3.turn(STARTS_AT + 2, STARTS_AT + 2)
    assert [o.cordon_only for o in sched3.orders] == [False] and events(shell3, "drain.deferred_started") == []


def test_a_dry_run_plans_a_deferred_drain_whole_at_once_timed_from_its_start():
    """Nothing is done in a dry run, so nothing waits: its one plan is the whole drain's."""
    d, sched, _, _, maint = setup()
    d.dry_run = True
    d.active = {maint.id: maint}
    d.turn(T0 + 0.1, T0 + 0.1)
    (o,) = sched.orders
    assert not o.cordon_only and o.ends.checkpoint_by == STARTS_AT + BUILTIN.drain.checkpoint_s
