"""Issue 26, points 1 and 2, in the drain core (executor.drain, executor.governing): one drain serves
every active notice, the earliest deadline governs it, each notice keeps its own record (and so its own
verdict), and a withdrawal undoes only what no other active notice wants."""
from __future__ import annotations

from common.contract import BUILTIN, Contract
from common.wire import DrainState, Step
from executor.governing import Candidate, Want, serve
from executor.scheduler import InPhase, NewState, Remaining, Remember, Saved, StepDone, Withdrawal
from tests.executor.test_drain_core import FakeScheduler, drains
from tests.support.notices import notice

T0 = 1_800_000_000.0


class WithdrawingScheduler(FakeScheduler):
    def __init__(self) -> None:
        super().__init__()
        self.withdrawals: list[Withdrawal] = []

    def withdraw(self, w: Withdrawal, now: float) -> None:
        self.withdrawals.append(w)


# The maintenance drains at once here (the built-in contract defers it to deadline - budget_s:
# tests/executor/test_deferred_start.py): these tests are about a drain in progress.
AT_ONCE = Contract.from_payload({**BUILTIN.to_dict(), "start": {"maintenance": "at_once"}})


def two_notices(contract: Contract = AT_ONCE):
    """A maintenance (600 s) draining, then a reclaim (40 s) two seconds later."""
    d, _, shell = drains(contract)
    sched = d.scheduler = WithdrawingScheduler()
    maint = notice("maint", "maintenance", deadline_in=600, now=T0)
    reclaim = notice("reclaim", "reclaim", deadline_in=42, now=T0 + 2)
    d.active = {maint.id: maint}
    d.turn(T0 + 0.1, T0 + 0.1)
    sched.pending = [StepDone(maint.id, Step.CORDONED, "drain.cordoned"), InPhase(maint.id, "evict"),
                     Remaining(maint.id, ("default/db-0",))]
    d.on_reports(T0 + 0.5, T0 + 0.5)
    d.active = {maint.id: maint, reclaim.id: reclaim}
    d.turn(T0 + 2.1, T0 + 2.1)
    return d, sched, shell, maint, reclaim


def test_the_earliest_deadline_governs_the_one_drain():
    """A reclaim behind a maintenance drain: from the next turn the scheduler is handed the reclaim's
    order, and only that one (before: one order per notice, and the second never ran)."""
    d, sched, _, _maint, reclaim = two_notices()
    assert [o.notice_id for o in sched.orders] == ["maint", "reclaim"]
    o = sched.orders[-1]
    assert (o.kind, o.deadline) == ("reclaim", reclaim.deadline)
    assert o.fallback_allowed and o.fallback_at < reclaim.deadline
    d.turn(T0 + 2.4, T0 + 2.4)
    assert [o.notice_id for o in sched.orders] == ["maint", "reclaim", "reclaim"]
    assert d.service.served == ("reclaim", "maint")


def test_a_served_notice_sees_the_drain_and_ends_with_it():
    """The notice that no longer governs keeps its own record up to the drain: cordoned, what is left,
    the phase; when the node is empty both are done, each with node_empty -- one verdict each."""
    d, sched, shell, maint, reclaim = two_notices()
    rec = d.records[reclaim.id]
    assert Step.CORDONED in rec.steps and rec.remaining == ["default/db-0"] and rec.phase == "evict"
    assert ("drain.cordoned", reclaim.id) in [(t, n) for t, n, _ in shell.events]
    sched.pending = [Remaining(reclaim.id, ("default/db-0", "default/web-1")), InPhase(reclaim.id, "checkpoint")]
    d.on_reports(T0 + 3, T0 + 3)
    assert d.records[maint.id].remaining == ["default/db-0", "default/web-1"]
    assert d.records[maint.id].phase == "checkpoint"
    sched.pending = [Remaining(reclaim.id, ()), StepDone(reclaim.id, Step.NODE_EMPTY, "drain.node_empty"),
                     NewState(reclaim.id, DrainState.DONE)]
    d.on_reports(T0 + 9, T0 + 9)
    assert {nid: r.state for nid, r in d.records.items()} == {"maint": "done", "reclaim": "done"}
    assert all(Step.NODE_EMPTY in r.steps for r in d.records.values())
    assert sorted(n for t, n, _ in shell.events if t == "drain.node_empty") == ["maint", "reclaim"]


def test_the_drains_memory_follows_it_to_the_notice_that_takes_over():
    """Pods evicted under the maintenance's order are in the reclaim's order's memo: nothing twice."""
    d, sched, _, maint, reclaim = two_notices()
    sched.pending = [Remember(reclaim.id, {"evicted": {"u1": "default/a"}})]
    d.on_reports(T0 + 3, T0 + 3)
    assert d.records[maint.id].memo == {"evicted": {"u1": "default/a"}}
    d.active = {maint.id: maint}    # the reclaim withdrawn (below): the maintenance governs again
    d.withdrawn = frozenset({reclaim.id})
    d.turn(T0 + 4, T0 + 4)
    assert sched.orders[-1].notice_id == maint.id and sched.orders[-1].memo == {"evicted": {"u1": "default/a"}}


def test_withdrawing_one_of_two_keeps_the_node_marked_for_the_other():
    d, sched, _, maint, reclaim = two_notices()
    for gone, other in ((reclaim, maint), (maint, reclaim)):
        d.active = {other.id: other}
        d.withdrawn = frozenset({gone.id})
        sched.withdrawals.clear()
        d.turn(T0 + 5, T0 + 5)
        (w,) = sched.withdrawals
        assert (w.notice_id, w.others_active, w.keep) == (gone.id, True, frozenset({other.id}))
        assert w.marker is not None and (w.marker.notice_id, w.marker.kind) == (other.id, other.kind)
        d.active = {maint.id: maint, reclaim.id: reclaim}
        d.withdrawn = frozenset()
    d.active, d.withdrawn = {}, frozenset({maint.id, reclaim.id})
    sched.withdrawals.clear()
    d.turn(T0 + 6, T0 + 6)
    assert {(w.notice_id, w.others_active, w.keep) for w in sched.withdrawals} == {
        (maint.id, False, frozenset()), (reclaim.id, False, frozenset())}


def test_a_finished_drain_still_keeps_the_node_marked():
    """The reclaim done, the maintenance cancelled: the reclaim still wants the node closed."""
    d, sched, _, maint, reclaim = two_notices()
    sched.pending = [NewState(reclaim.id, DrainState.DONE)]
    d.on_reports(T0 + 9, T0 + 9)
    d.active, d.withdrawn = {reclaim.id: reclaim}, frozenset({maint.id})
    sched.withdrawals.clear()
    d.turn(T0 + 10, T0 + 10)
    (w,) = sched.withdrawals
    assert w.others_active and w.marker is not None and w.marker.notice_id == reclaim.id


def test_a_cordon_only_notice_is_served_by_the_drain_and_ends_cordoned():
    contract = Contract.from_payload({**AT_ONCE.to_dict(), "kinds": {"maintenance": "cordon"}})
    d, sched, _, maint, reclaim = two_notices(contract)
    assert sched.orders[0].cordon_only and not sched.orders[-1].cordon_only
    assert d.records[maint.id].state == DrainState.CORDONED_ONLY   # cordoned: all it wants
    assert d.service.marking == frozenset({maint.id, reclaim.id})


def test_a_save_the_disk_refused_is_answered_not_ok():
    """The fallback's marker: the scheduler learns whether it is durably on disk (point 4)."""
    d, sched, shell = drains()
    shell.save = lambda: False   # type: ignore[method-assign]
    n = notice("n1", now=T0)
    d.active = {n.id: n}
    d.turn(T0, T0)
    saved = Saved()
    sched.pending = [Remember(n.id, {"fallback_started": T0 + 1}, saved)]
    d.on_reports(T0 + 1, T0 + 1)
    assert saved.wait(0) and saved.ok is False


def test_serve_picks_the_drain_over_a_cordon_and_breaks_ties_by_id():
    c = [Candidate("m", 100.0, Want.CORDON, True), Candidate("r2", 300.0, Want.DRAIN, True),
         Candidate("r1", 300.0, Want.DRAIN, True), Candidate("done", 50.0, Want.DRAIN, False),
         Candidate("ign", 10.0, Want.NOTHING, True)]
    s = serve(c)
    assert (s.governing, s.served) == ("r1", ("r1", "r2", "m"))
    assert s.marking == frozenset({"m", "r1", "r2", "done"}) and s.marker == "r1"
    assert serve([Candidate("done", 50.0, Want.DRAIN, False)]).marker == "done"
    assert serve([]).governing is None
