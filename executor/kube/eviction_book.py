"""Every pod's eviction, as a state machine, and what to send next (pure: no I/O, clock passed in).

The drain adapter (``executor.kube.runner``) feeds the book what it sees and hears --
``observe`` each listing of the node, ``answer`` each API reply -- and asks
``next_actions`` what to send. The book says which events happened; it
never calls anything.

A pod's phases, and the answer that moves it (``_NEXT``)::

    pending --send--> in_flight --accepted--> accepted --(gone from listing)--> gone
                          |  \\--gone (404, or 409: the UID precondition says it is another pod)--> gone
                          |   \\--refused (not our node: never retried)--> refused
                          |    \\--unsupported (no Eviction version to send: never a DELETE)--> refused
                          \\--blocked (PDB 429) / throttled (APF 429) / error / unreachable--> retry
                                                                          --(backoff due)--> in_flight

The two 429s get their own retry (``executor.kube.pacing``): a PDB refusal is retried
soon and counts towards escalation at the cutoff; a throttled answer holds every send of
the book until the server's Retry-After (with jitter) and never escalates the pod.

Scheduling, before the evict cutoff: lanes (one PDB each) send one eviction
at a time and never skip past a pod its PDB blocks; a pod is sent only when the
watched PDB status has room for it (``budget_gate``: no eviction the server would
refuse, while the watch works; the server's 429 stays the authority); tier 1 (system-critical)
starts once every tier-0 lane is done or stuck (its PDB has refused for
``STUCK_AFTER_S``, or had no room that long: a PDB with maxUnavailable 1 refuses after every eviction
until that pod is gone, which is pace, not a block); pods whose workloads are
still checkpointing (agent-socket clients that have not acked) wait until they
ack or the checkpoint window ends. At the evict cutoff (the contract's clock,
or the verifier's ``evict_over`` escalation) the order is lifted: every pod
left is evicted at once, and a pod its PDB still blocks is deleted or
reported, as the contract's ``pdb_blocked`` says. Reported pods keep being
retried politely: the budget may still allow them before the machine goes.

Two clocks (``common.clock``): the phase ends are wall-clock epochs (``Moment.wall``); every
wait -- a retry's backoff, a throttle, "stuck for 3 s", a lane's wake -- is on the monotonic clock
(``Moment.mono``), so a wall clock stepped back does not stall the drain and one stepped ahead
does not make every pod look stuck.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.clock import Moment, MonoTime, WallTime
from common.events import EventType
from common.pod_policy import Rules
from common.wire import PhaseEnds
from executor.kube import pacing
from executor.kube.budget_gate import CLOSED, BudgetGate, BudgetStatus
from executor.kube.drain_plan import (
    EMPTY_PLAN,
    Covering,
    Lane,
    Plan,
    PodMemo,
    Target,
    drain_plan,
    grace_for,
    pdbs_key,
    plan_key,
    policy_events,
)

PENDING, IN_FLIGHT, RETRY, ACCEPTED, GONE, REFUSED = "pending", "in_flight", "retry", "accepted", "gone", "refused"
DONE = frozenset({ACCEPTED, GONE, REFUSED})
OUTCOMES = ("accepted", "gone", "blocked", "throttled", "error", "unreachable", "refused", "unsupported")
_NEXT = {"accepted": ACCEPTED, "gone": GONE, "blocked": RETRY, "throttled": RETRY, "error": RETRY,
         "unreachable": RETRY, "refused": REFUSED, "unsupported": REFUSED}
# Past the cutoff, a pod whose last answer was one of these is reported (drain.eviction_blocked).
# An unreachable or throttling server is not the pod's budget: just retry.
REPORT_AFTER = ("blocked", "error")
# ... and only a PodDisruptionBudget's refusal -- "blocked": a 429 whose Status carries the
# DisruptionBudget cause (eviction.go checkAndDecrement; ``pacing.classify_429``) -- turns into a
# DELETE under ``pdb_blocked = delete``. A webhook's denial (403/400 "admission webhook ... denied
# the request"), a server error (500) or a plain APF 429 never does: the policy bypasses budgets,
# not whoever else said no.
DELETE_AFTER = ("blocked",)
STUCK_AFTER_S = 3.0


@dataclass(frozen=True, slots=True)
class PodState:
    phase: str = PENDING
    op: str = ""                  # the call in flight or last sent: evict | delete
    grace_s: int | None = None    # gracePeriodSeconds of that call (None: the pod's own)
    attempts: int = 0             # answers that did not move the pod (throttling not counted)
    throttles: int = 0            # throttled answers in a row
    last: str = ""                # the last answer's outcome
    retry_at: float = 0.0                  # MonoTime
    blocked_since: float | None = None     # MonoTime
    pdb: str = ""                 # the PDB the server named in its last 429
    error: str = ""
    reported: bool = False        # drain.eviction_blocked emitted


@dataclass(frozen=True, slots=True)
class Answer:
    outcome: str        # one of OUTCOMES
    detail: str = ""
    pdb: str = ""
    retry_after: float | None = None   # the 429's Retry-After, seconds
    sent_at: float = 0.0               # monotonic: when the call went out (pacing.ConcurrencyLimit)
    latency_s: float = 0.0             # how long its answer took

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the executor's loop knows that the book does not."""

    held: frozenset[str] = frozenset()   # uids of pods whose agent-socket clients have not acked
    hold_all: bool = False               # a client we cannot place on a pod holds every pod
    escalated: bool = False              # the verifier announced evict_over (or final)
    # pod uid -> until when its client's extend grant holds it (epoch; executor.extension): past
    # checkpoint_by and past the evict cutoff too, for that pod alone
    held_until: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Action:
    op: str                  # evict | delete
    uid: str
    key: str
    grace_s: int | None
    pod: dict[str, Any] = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Emit:
    event: EventType
    data: dict[str, Any]


def transition(st: PodState, answer: Answer, now: MonoTime, draw: float = 0.0) -> PodState:
    """The state after an answer to the call in flight (``now``: the monotonic clock, which every
    retry is timed on); ``draw`` in [0, 1): the retry's jitter."""
    def rand() -> float:
        return draw

    phase = _NEXT[answer.outcome]
    if answer.outcome == "throttled":
        throttles = st.throttles + 1
        return dataclasses.replace(
            st, phase=RETRY, throttles=throttles, last=st.last or "throttled",
            retry_at=now + pacing.throttled_delay(throttles, answer.retry_after, rand))
    attempts = st.attempts + (1 if phase == RETRY else 0)
    blocked_since = st.blocked_since
    if answer.outcome == "blocked" and blocked_since is None:
        blocked_since = now
    retry_at = now + pacing.refused_delay(attempts, answer.retry_after, rand) if phase == RETRY else 0.0
    return dataclasses.replace(
        st, phase=phase, attempts=attempts, throttles=0, last=answer.outcome,
        retry_at=retry_at, blocked_since=blocked_since,
        pdb=answer.pdb or st.pdb, error=answer.detail[:300] if phase in (RETRY, REFUSED) else st.error)


class EvictionBook:
    """The drain's memory between listings: one PodState per pod UID ever seen."""

    def __init__(self, ends: PhaseEnds, received_at: float, pdb_blocked: str, *,  # noqa: PLR0913 -- keyword-only, each with its default
                 evicted: frozenset[str] = frozenset(), deleted: frozenset[str] = frozenset(),
                 reported: frozenset[str] = frozenset(), rules: Rules | None = None) -> None:
        if pdb_blocked not in ("delete", "report"):
            raise ValueError(f"pdb_blocked must be delete or report, got {pdb_blocked!r}")
        self.ends = ends
        self.received_at = received_at
        self.pdb_blocked = pdb_blocked
        # Restart safety: what an earlier run of the executor already did is never done again.
        self._done_before = evicted | deleted
        self._reported = reported
        self.states: dict[str, PodState] = {}
        self.targets: dict[str, Target] = {}   # every target ever seen (answers may outlive a listing)
        self.plan: Plan = EMPTY_PLAN
        # A throttled answer means the server sheds this agent's load, not that pod's: no send at
        # all until then (the pods' own retry_at say the same, this also holds back fresh pods).
        self.throttled_until = float("-inf")   # MonoTime
        self.gate = BudgetGate()
        self.limit = pacing.ConcurrencyLimit(1 << 16)   # capped by next_actions' slots (the workers)
        self._plan_key: tuple[Any, ...] | None = None
        self._planned: list[dict[str, Any]] | None = None   # the pods list planned (passed again: no change)
        self._covering: Covering = {}
        self._judged: PodMemo = {}                 # each pod version's place in the plan (drain_plan)
        self._gated_since: dict[str, float] = {}   # lane -> since when (MonoTime) its next pod has had no room
        self.rules = rules                         # each pod's own policy (common.pod_policy); None: all move
        self._policy_said: set[str] = set()        # uids whose policy (or loss) has been announced

    # -- inputs -------------------------------------------------------------------------
    def observe(self, pods: list[dict[str, Any]], pdbs: list[dict[str, Any]] | None,
                now: Moment | None = None, budgets: dict[str, BudgetStatus] | None = None) -> None:
        """A fresh listing of the node: replan, and learn which pods left or appeared. With ``now``,
        a pod leaving wakes the pods its PDB refused (``pacing.LANE_WAKE_S`` later): that is the
        moment the budget can allow the next one, sooner than the backoff would say. ``budgets``:
        the PDBs' status as watched now ("ns/name" -> status; None: not watched). The budget gate's bound runs on
        ``now.mono`` (without ``now``, its evictions never lapse)."""
        self._replan(pods, pdbs)
        self.gate.update(budgets, None if now is None else now.mono)
        freed: set[str] = set()
        for uid, st in self.states.items():
            if uid not in self.plan.targets and st.phase not in (IN_FLIGHT, GONE):
                if uid in self.targets:
                    freed.add(self.targets[uid].lane)
                self.states[uid] = dataclasses.replace(st, phase=GONE)
        if now is not None and freed:
            self._wake(freed, now.mono + pacing.LANE_WAKE_S)
        for uid, t in self.plan.targets.items():
            self.targets[uid] = t
            seen = self.states.get(uid)
            if seen is None:
                st = PodState(reported=uid in self._reported)
                # Being deleted already (by us before a restart, or by anyone): never evict it again.
                if t.terminating or uid in self._done_before:
                    st = dataclasses.replace(st, phase=ACCEPTED)
                self.states[uid] = st
            elif seen.phase in (PENDING, RETRY) and t.terminating:
                self.states[uid] = dataclasses.replace(seen, phase=ACCEPTED)

    def _replan(self, pods: list[dict[str, Any]], pdbs: list[dict[str, Any]] | None) -> None:
        if pods is self._planned and self._plan_key is not None and pdbs_key(pdbs) == self._plan_key[1]:
            return   # the very list planned last turn (a watch's unchanged snapshot), same PDBs
        self._planned, key = pods, plan_key(pods, pdbs)
        if key != self._plan_key:   # a PDB's status changing (most turns) leaves the plan as it is
            if self._plan_key is None or key[1] != self._plan_key[1]:
                self._covering, self._judged = {}, {}   # the PDBs changed: match their selectors again
            self.plan, self._plan_key = drain_plan(pods, pdbs, self._covering, self.rules, self._judged), key

    def _wake(self, lanes: set[str], at: float) -> None:
        for uid, t in self.plan.targets.items():
            st = self.states.get(uid)
            if t.lane in lanes and st is not None and st.phase == RETRY and st.last == "blocked" and st.retry_at > at:
                self.states[uid] = dataclasses.replace(st, retry_at=at)

    def answer(self, uid: str, answer: Answer, now: Moment, draw: float = 0.0) -> list[Emit]:
        """Feed the answer to the pod's call in flight; ``draw``: a random number in [0, 1) for
        its retry's jitter (passed in, so the book stays deterministic under test). The budget gate counts an
        accepted eviction from ``now.mono``."""
        st = self.states.get(uid)
        if st is None or st.phase != IN_FLIGHT:
            return []
        t = self.targets[uid]
        if answer.pdb and "/" not in answer.pdb:
            # A 429 names the PDB without its namespace, which is the pod's.
            answer = dataclasses.replace(answer, pdb=f"{t.key.split('/', 1)[0]}/{answer.pdb}")
        new = transition(st, answer, now.mono, draw)
        self.states[uid] = new
        # The answer's own monotonic stamps: sent, and heard (sent + latency).
        self.limit.answered(answer.outcome, answer.sent_at, answer.latency_s, answer.sent_at + answer.latency_s,
                            lambda: draw)
        if answer.outcome == "throttled":
            self.throttled_until = max(self.throttled_until, new.retry_at)
        base = {"pod": t.key, "uid": uid, "pdb": new.pdb or t.pdb,
                "since_received_ms": round((now.wall - self.received_at) * 1000)}
        if answer.outcome == "accepted":
            data = dict(base, attempts=st.attempts + 1, grace_s=st.grace_s)
            if st.op == "delete":
                return [Emit("drain.deleted", dict(data, reason="pdb_blocked"))]
            self.gate.took(t.pdbs, t.pod, now.mono)
            return [Emit("drain.evicted", data)]
        if answer.outcome == "refused":
            return [Emit("drain.error", dict(base, error=new.error))]
        if answer.outcome == "unsupported":
            return [Emit("drain.eviction_unsupported", dict(base, error=new.error))]
        return []

    # -- decisions ----------------------------------------------------------------------
    def remaining(self) -> list[str]:
        """namespace/name of every pod that still counts (the verifier judges by this)."""
        return sorted(t.key for t in self.plan.targets.values())

    def empty(self) -> bool:
        return not self.plan.targets

    def past_evict_cutoff(self, now: WallTime, inputs: Inputs) -> bool:
        return inputs.escalated or now >= self.ends.evict_at

    def holding(self, now: WallTime, inputs: Inputs) -> bool:
        """Are workloads still checkpointing (some pod held back)?"""
        if (now >= self.ends.checkpoint_by or self.past_evict_cutoff(now, inputs)) and not inputs.held_until:
            return False
        return any(self.states[uid].phase not in DONE and self._held(uid, now, inputs)
                   for uid in self.plan.targets)

    def next_due(self) -> float | None:
        """The earliest moment (MonoTime) a retry falls due (or throttling ends), if any."""
        due = min((st.retry_at for st in self.states.values() if st.phase == RETRY), default=None)
        if due is not None and self.throttled_until > due:
            return self.throttled_until
        return due

    def in_flight(self) -> int:
        return sum(1 for st in self.states.values() if st.phase == IN_FLIGHT)

    def next_actions(self, now: Moment, inputs: Inputs, slots: int) -> tuple[list[Action], list[Emit]]:
        """The calls to send now and the events they imply: at most ``slots`` (the workers) in
        flight, and no more than the server's answers allow (``limit``, AIMD)."""
        self.limit.cap(slots)
        emits = [Emit(event, data) for event, data in policy_events(self.plan, self._policy_said, inputs.held_until)]
        if now.mono < self.throttled_until:
            return [], emits
        if self.past_evict_cutoff(now.wall, inputs):
            picks = self._after_cutoff(now, emits)
        else:
            picks = self._by_the_book(now, inputs)
        # An extension, or the pod's own policy, holds it past the cutoff too.
        picks = [p for p in picks if now.wall >= max(inputs.held_until.get(p[0], 0.0), self.targets[p[0]].hold_until)]
        actions: list[Action] = []
        free = self.limit.slots() - self.in_flight()
        for uid, op in picks:
            if len(actions) >= free:
                break
            t = self.targets[uid]
            grace = grace_for(t.grace_s, now.wall, self.ends.cutoff)
            self.states[uid] = dataclasses.replace(self.states[uid], phase=IN_FLIGHT, op=op, grace_s=grace)
            actions.append(Action(op, uid, t.key, grace, t.pod))
        return actions, emits

    def _held(self, uid: str, now: WallTime, inputs: Inputs) -> bool:
        if now < inputs.held_until.get(uid, 0.0):
            return True
        return now < self.ends.checkpoint_by and (inputs.hold_all or uid in inputs.held)

    def _lane_next(self, lane: Lane, now: Moment, inputs: Inputs) -> tuple[str, str | None]:
        """(lane state, uid to send): state is done | stuck | busy; one eviction per lane at a
        time, never past a pod its PDB blocks (the next one would be blocked too), and none while
        the watched budget has no room."""
        waiting = False
        for uid in lane.uids:
            st = self.states[uid]
            if st.phase in DONE:
                continue
            if st.phase == IN_FLIGHT:
                return "busy", None
            if now.wall < self.targets[uid].hold_until:
                continue   # its own policy keeps it: it holds up neither its lane nor the next tier
            if self._held(uid, now.wall, inputs):
                waiting = True
                continue
            stuck = (not waiting and st.last == "blocked" and st.blocked_since is not None
                     and now.mono - st.blocked_since >= STUCK_AFTER_S)
            due = st.phase == PENDING or st.retry_at <= now.mono
            t = self.targets[uid]
            if due and self.gate.verdict(t.pdbs, t.pod) == CLOSED:
                since = self._gated_since.setdefault(lane.key, now.mono)
                stuck = stuck or (not waiting and now.mono - since >= STUCK_AFTER_S)
                return ("stuck" if stuck else "busy"), None
            self._gated_since.pop(lane.key, None)
            return ("stuck" if stuck else "busy"), (uid if due else None)
        return ("busy" if waiting else "done"), None

    def _by_the_book(self, now: Moment, inputs: Inputs) -> list[tuple[str, str]]:
        picks: list[tuple[str, str]] = []
        settled = True   # every lane of the tiers before this one is done or blocked
        tier = 0
        for lane in self.plan.lanes:
            if lane.tier != tier:
                if not settled:
                    break
                tier = lane.tier
            state, uid = self._lane_next(lane, now, inputs)
            if uid is not None:
                picks.append((uid, "evict"))
            if state == "busy":
                settled = False
        return picks

    def _after_cutoff(self, now: Moment, emits: list[Emit]) -> list[tuple[str, str]]:
        picks: list[tuple[str, str]] = []
        for uid in self.plan.order():
            st = self.states[uid]
            if st.phase == PENDING:
                picks.append((uid, "evict"))
            elif st.phase != RETRY:
                continue
            elif st.last not in REPORT_AFTER:
                if st.retry_at <= now.mono:
                    picks.append((uid, st.op or "evict"))
            elif self.pdb_blocked == "delete" and (st.last in DELETE_AFTER or st.op == "delete"):
                # (op "delete": the PDB's refusal already decided it; a failed delete is retried)
                if st.op != "delete" or st.retry_at <= now.mono:
                    picks.append((uid, "delete"))
            else:
                if not st.reported:
                    self.states[uid] = st = dataclasses.replace(st, reported=True)
                    emits.append(self._blocked_event(uid, st, now))
                if st.retry_at <= now.mono:
                    picks.append((uid, "evict"))
        return picks

    def _blocked_event(self, uid: str, st: PodState, now: Moment) -> Emit:
        t = self.targets[uid]
        since = st.blocked_since if st.blocked_since is not None else now.mono
        return Emit("drain.eviction_blocked", {
            "pod": t.key, "uid": uid, "pdb": st.pdb or t.pdb, "attempts": st.attempts,
            "blocked_for_ms": round((now.mono - since) * 1000), "error": st.error,
            "since_received_ms": round((now.wall - self.received_at) * 1000)})
