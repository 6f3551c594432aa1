"""Issue 26, point 10: the executor's drain core (executor.drain) against a small reference model,
driven by Hypothesis' stateful testing.

Random sequences of notices of every kind and deadline (a maintenance's drain deferred to
``deadline - budget_s``, issue 28), cancels, the same reclaim again from a
second channel (another id, the same deadline give or take), executor restarts (the core rebuilt
from the records it last saved, the scheduler's threads and unread reports lost) and API-server
outages. ``ModelScheduler`` stands in for the Kubernetes scheduler as its documented contract says
(executor/scheduler.py, executor/kube/scheduler.py): one runner for the order it was last handed,
stopped when another notice's order or the notice's withdrawal comes; it cordons and evicts one pod
a turn while the server answers; a withdrawal undoes the node only if ``others_active`` is false.

After every step:
- the node is never opened while an active notice wants it, and once the server answers and the
  loop has turned, it is cordoned iff one does;
- no pod is evicted by the drain of a withdrawn notice, nor by a deferred one before its start;
- a record goes from running to one end state (or withdrawn), never from an end to another, and
  ``drain.node_empty`` is said at most once per notice: one verdict each;
- the order handed over is the governing notice's: the earliest deadline among the running drains
  that want the node drained (else cordoned) -- a deferred one wants it drained from its start.
"""
from __future__ import annotations

import io
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from common.contract import BUILTIN, Contract
from common.log import Logger
from common.notice import Notice
from common.wire import DrainRecord, DrainState, Step
from executor.drain import Drains
from executor.scheduler import NewState, Order, Remaining, Report, StepDone, Withdrawal

T0 = 1_800_000_000.0
LINGER_S = 30.0
KINDS = ("reclaim", "rebalance", "maintenance", "live_migration")
# rebalance cordons only, live_migration is ignored, a maintenance's drain starts at deadline - budget_s
# (the built-in start): every policy and both starts are exercised.
CONTRACT = Contract.from_payload({**BUILTIN.to_dict(), "kinds": {
    "reclaim": "drain", "rebalance": "cordon", "maintenance": "drain", "live_migration": "ignore"},
    "start": {"reclaim": "at_once", "maintenance": "deadline_minus_budget"}})
POLICY = {"reclaim": "drain", "rebalance": "cordon", "maintenance": "drain", "live_migration": "ignore"}
DEFERRED = {"maintenance"}


def starts_at(n: Notice) -> float:
    """When the reference model says the notice's drain may move work."""
    return n.deadline - CONTRACT.drain.budget_s if n.kind in DEFERRED else float("-inf")


class Node:
    """The Kubernetes node as the cluster holds it: it outlives executor restarts."""

    def __init__(self) -> None:
        self.cordoned = False
        self.marked_for: str | None = None
        self.pods = {f"default/p{i}" for i in range(4)}
        self.api_up = True
        self.evictions: list[tuple[str, str]] = []   # (pod, the notice whose drain evicted it)


class ModelScheduler:
    def __init__(self, node: Node, model: NodeModel) -> None:
        self.node, self.model = node, model
        self.running: Order | None = None
        self.pending: list[Report] = []
        self.told_cordoned: set[str] = set()
        self.handed: list[str] = []   # the notice ids of the orders handed over this turn

    # -- the Scheduler protocol --------------------------------------------------------
    def advance(self, order: Order, now: float) -> None:
        self.handed.append(order.notice_id)
        self.running = order   # another notice's order: the previous runner is stopped

    def withdraw(self, w: Withdrawal, now: float) -> None:
        if self.running is not None and self.running.notice_id == w.notice_id:
            self.running = None
        if not self.node.api_up:
            return   # retried on the next turn
        if w.others_active:
            if w.marker is not None:
                self.node.cordoned, self.node.marked_for = True, w.marker.notice_id
        elif self.node.marked_for is None or self.node.marked_for not in w.keep:
            self.model.opened(self.node)
            self.node.cordoned, self.node.marked_for = False, None
        self.pending += [StepDone(w.notice_id, Step.UNCORDONED, "drain.uncordoned"),
                         NewState(w.notice_id, DrainState.WITHDRAWN)]

    def reports(self) -> list[Report]:
        out, self.pending = self.pending, []
        return out

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass

    # -- the runner's thread, one step of it -----------------------------------------------
    def work(self, now: float) -> None:
        o = self.running
        if o is None:
            return
        nid = o.notice_id
        if now > o.deadline + LINGER_S:
            self.pending.append(NewState(nid, DrainState.ENDED))
            self.running = None
            return
        if not self.node.api_up:
            self.pending.append(Remaining(nid, ("api-server:unreachable",)))
            return
        self.node.cordoned, self.node.marked_for = True, nid
        if Step.CORDONED not in o.steps_done and nid not in self.told_cordoned:
            self.told_cordoned.add(nid)
            self.pending.append(StepDone(nid, Step.CORDONED, "drain.cordoned"))
        if o.cordon_only:
            self.pending.append(NewState(nid, DrainState.CORDONED_ONLY))
            self.running = None
            return
        if self.node.pods:
            pod = min(self.node.pods)
            self.model.evicted(pod, nid)
            self.node.pods.discard(pod)
            self.node.evictions.append((pod, nid))
        self.pending.append(Remaining(nid, tuple(sorted(self.node.pods))))
        if not self.node.pods:
            self.pending += [StepDone(nid, Step.NODE_EMPTY, "drain.node_empty"), NewState(nid, DrainState.DONE)]
            self.running = None


class Shell:
    def __init__(self) -> None:
        self.log = Logger("executor", stream=io.StringIO())
        self.events: list[tuple[str, str]] = []
        self.drains: Drains | None = None
        self.saved: dict[str, Any] = {}

    def emit(self, type: str, notice_id: str, data: dict[str, Any], now: float) -> object:
        self.events.append((type, notice_id))
        return None

    def save(self) -> bool:
        assert self.drains is not None
        self.saved = {nid: r.to_dict() for nid, r in self.drains.records.items()}
        return True

    def publish(self) -> None:
        pass


class NodeModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.node = Node()
        self.shell = Shell()
        self.notices: dict[str, Notice] = {}      # every notice ever announced
        self.active: dict[str, Notice] = {}
        self.withdrawn: set[str] = set()
        self.seq = 0
        self.history: dict[str, list[str]] = {}   # notice id -> the states its record went through
        self.failures: list[str] = []
        self._boot()

    def _boot(self, records: dict[str, DrainRecord] | None = None) -> None:
        self.sched = ModelScheduler(self.node, self)
        self.drains = Drains(self.sched, None, self.shell, records or {})
        self.shell.drains = self.drains
        self.drains.contract, self.drains.contract_heard = CONTRACT, True
        self._publish()

    def _publish(self) -> None:
        self.drains.active = dict(self.active)
        self.drains.withdrawn = frozenset(self.withdrawn)

    # -- what the reference model says ---------------------------------------------------
    def wanting(self) -> set[str]:
        return {nid for nid, n in self.active.items() if POLICY[n.kind] != "ignore"}

    def opened(self, node: Node) -> None:
        if node.cordoned and self.wanting():
            self.failures.append(f"node opened while {sorted(self.wanting())} want it")

    def evicted(self, pod: str, by: str) -> None:
        if by in self.withdrawn:
            self.failures.append(f"{pod} evicted by the drain of withdrawn {by}")
        if self.now < starts_at(self.notices[by]):
            self.failures.append(f"{pod} evicted by {by}'s deferred drain before its start")

    def expected_governing(self) -> str | None:
        running = [(n, self.drains.records[nid]) for nid, n in self.active.items()
                   if nid in self.drains.records and self.drains.records[nid].state == DrainState.RUNNING
                   and POLICY[n.kind] != "ignore"]
        if not running:
            return None
        drain = [n for n, r in running if r.policy == "drain" and self.now >= starts_at(n)]
        pool = drain or [n for n, _ in running]
        return min(pool, key=lambda n: (n.deadline, n.id)).id

    # -- one loop turn, as the executor runs it ---------------------------------------------
    def _turn(self) -> None:
        self.sched.handed.clear()
        self.drains.on_reports(self.now, self.now)
        self.drains.turn(self.now, self.now)
        expected = self.expected_governing()
        for nid in self.sched.handed:
            if nid != expected:
                self.failures.append(f"order for {nid}, but {expected} governs")
        self.sched.work(self.now)
        self.drains.on_reports(self.now, self.now)
        self._record_states()

    def _record_states(self) -> None:
        for nid, rec in self.drains.records.items():
            seen = self.history.setdefault(nid, [])
            if not seen or seen[-1] != rec.state:
                seen.append(rec.state)

    # -- rules ---------------------------------------------------------------------------
    @rule(kind=st.sampled_from(KINDS), deadline_in=st.sampled_from([30.0, 40.0, 120.0, 600.0]))
    def announce(self, kind: str, deadline_in: float) -> None:
        self.seq += 1
        n = Notice(id=f"n{self.seq}", kind=kind, node="node-a", instance_id="i-1", issued_at=self.now,
                   deadline=self.now + deadline_in, source="aws", received_at=self.now)
        self.notices[n.id] = self.active[n.id] = n
        self._publish()
        self._turn()

    @precondition(lambda self: bool(self.active))
    @rule(data=st.data(), skew=st.sampled_from([0.0, 1.0, 3.0]))
    def same_notice_from_another_channel(self, data: st.DataObject, skew: float) -> None:
        """The relay's reclaim and the metadata service's: two ids, nearly the same deadline."""
        first = self.active[data.draw(st.sampled_from(sorted(self.active)))]
        self.seq += 1
        n = Notice(id=f"n{self.seq}", kind=first.kind, node="node-a", instance_id="i-1", issued_at=first.issued_at,
                   deadline=first.deadline + skew, source="aws", channel="metadata", received_at=self.now)
        self.notices[n.id] = self.active[n.id] = n
        self._publish()
        self._turn()

    @precondition(lambda self: bool(self.active))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        nid = data.draw(st.sampled_from(sorted(self.active)))
        del self.active[nid]
        self.withdrawn.add(nid)
        self._publish()
        self._turn()

    @rule(seconds=st.sampled_from([0.25, 1.0, 5.0, 30.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self._turn()

    @rule()
    def server_goes_down(self) -> None:
        self.node.api_up = False
        self._turn()

    @rule()
    def server_comes_back(self) -> None:
        self.node.api_up = True
        self._turn()

    @rule()
    def executor_restarts(self) -> None:
        records = {nid: DrainRecord.from_dict(d) for nid, d in self.shell.saved.items()}
        self._boot(records)
        self._turn()

    @rule()
    def pods_land(self) -> None:
        """A pod scheduled before the cordon (or a DaemonSet's) shows up on the node."""
        self.seq += 1
        if not self.node.cordoned:
            self.node.pods.add(f"default/late{self.seq}")
        self._turn()

    # -- after every step ------------------------------------------------------------------
    @invariant()
    def nothing_failed(self) -> None:
        assert not self.failures, self.failures

    @invariant()
    def cordoned_iff_wanted_once_the_server_answers(self) -> None:
        if not self.node.api_up:
            return
        self._turn()   # a turn for the reports of the last step to land (the real loop's next)
        self._turn()
        assert self.node.cordoned == bool(self.wanting()), (self.node.cordoned, sorted(self.wanting()))

    @invariant()
    def one_end_per_notice(self) -> None:
        for nid, states in self.history.items():
            ends = [s for s in states if s in DrainState.ENDS]
            assert len(ends) <= 1, (nid, states)
            if DrainState.WITHDRAWN in states:
                assert states[-1] == DrainState.WITHDRAWN, (nid, states)
        said = [nid for t, nid in self.shell.events if t == "drain.node_empty"]
        assert len(said) == len(set(said)), said

    def teardown(self) -> None:
        """Every notice ends: the server back, past every deadline, a few turns."""
        self.node.api_up = True
        self.now += 700.0
        for _ in range(3 * len(self.notices) + 3):   # one drain ends a turn: each then hands over
            self._turn()
        for nid in self.withdrawn:
            rec = self.drains.records.get(nid)
            assert rec is None or rec.state == DrainState.WITHDRAWN, (nid, rec.state if rec else None)
        for nid in self.active:
            rec = self.drains.records[nid]
            assert rec.state not in (DrainState.RUNNING, DrainState.WAITING), (nid, self.history.get(nid))
        assert not self.failures, self.failures


NodeModel.TestCase.settings = settings(max_examples=100, stateful_step_count=40, derandomize=True,
                                       deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestDrainCoreModel = NodeModel.TestCase
