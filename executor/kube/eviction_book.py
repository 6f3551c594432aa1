"""Every pod's eviction state, and what to send next (pure: no I/O, clock passed in).

The drain adapter (``executor.kube.runner``) feeds the book what it sees and hears --
``observe`` each listing of the node, ``answer`` each API reply -- and asks
``next_actions`` what to send. The book says which events happened; it
never calls anything.

A pod's phases, the answers that move it and the retry each leads to: ``pod_state``.

Scheduling, before the evict cutoff: lanes (one PDB each) send one eviction
at a time and never skip past a pod its PDB blocks; a pod is sent only when the
watched PDB status has room for it (``budget_gate``: no eviction the server would
refuse, while the watch works; the server's 429 stays the authority); tier 1 (system-critical)
starts once every tier-0 lane is done or stuck (its PDB has refused for
``STUCK_AFTER_S``, or had no room that long: a PDB with maxUnavailable 1 refuses after every eviction
until that pod is gone, which is pace, not a block); pods whose workloads are
still checkpointing (agent-socket clients that have not acked) wait until they
ack or the checkpoint window ends. At the evict cutoff (the contract's clock,
or the verifier's ``evict_over`` escalation) the order is lifted -- tiers and
checkpoint holds -- and a pod its PDB still blocks is deleted or reported, as
the contract's ``pdb_blocked`` says: under ``delete`` every pod left is
evicted at once (a PDB's refusal is what turns a pod into a DELETE); under
``report`` a PDB's lane keeps its pace (``_after_cutoff``). Reported pods keep
being retried politely: the budget may still allow them before the machine goes.
Other nodes' drains may share a PDB's room (``pdb_share``).

Two clocks (``common.clock``): the phase ends are wall-clock epochs (``Moment.wall``); every
wait -- a retry's backoff, a throttle, "stuck for 3 s", a lane's wake -- is on the monotonic clock
(``Moment.mono``), so a wall clock stepped back does not stall the drain and one stepped ahead
does not make every pod look stuck.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from common.clock import Moment, WallTime
from common.pod_policy import Rules
from common.wire import PhaseEnds
from executor.kube import pacing
from executor.kube.book_records import Action, Emit, Inputs
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
from executor.kube.pdb_share import PdbShare
from executor.kube.pod_state import (
    ACCEPTED,
    DELETE_AFTER,
    DONE,
    GONE,
    IN_FLIGHT,
    PENDING,
    REPORT_AFTER,
    RETRY,
    Answer,
    PodState,
    transition,
)

STUCK_AFTER_S = 3.0


class EvictionBook:
    """The drain's memory between listings: one PodState per pod UID ever seen."""

    def __init__(self, ends: PhaseEnds, received_at: float, pdb_blocked: str, *,  # noqa: PLR0913 -- keyword-only, each with its default
                 evicted: frozenset[str] = frozenset(), deleted: frozenset[str] = frozenset(),
                 reported: frozenset[str] = frozenset(), rules: Rules | None = None,
                 rand: Callable[[], float] = lambda: 0.0) -> None:
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
        self.share = PdbShare(rand)   # rand in [0, 1): its draws, the wakes' jitter (passed in: deterministic)
        self.left_under: set[str] = set()   # PDBs ("ns/name") a pod of the node left since ``take_left_under``

    # -- inputs -------------------------------------------------------------------------
    def observe(self, pods: list[dict[str, Any]], pdbs: list[dict[str, Any]] | None,
                now: Moment | None = None, budgets: dict[str, BudgetStatus] | None = None) -> None:
        """A fresh listing of the node: replan, and learn which pods left or appeared. With ``now``,
        a pod leaving wakes the pods its PDB refused (``pacing.LANE_WAKE_S`` later): that is the
        moment the budget can allow the next one, sooner than the backoff would say. ``budgets``:
        the PDBs' status as watched now ("ns/name" -> status; None: not watched). The budget gate's bound runs on
        ``now.mono`` (without ``now``, its evictions never lapse)."""
        self._replan(pods, pdbs)
        self._update_gate(budgets, now)
        freed: set[str] = set()
        for uid, st in self.states.items():
            if uid not in self.plan.targets and st.phase not in (IN_FLIGHT, GONE):
                if uid in self.targets:
                    freed.add(self.targets[uid].lane)
                    self.left_under.update(self.targets[uid].pdbs)
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

    def _update_gate(self, budgets: dict[str, BudgetStatus] | None, now: Moment | None) -> None:
        """The watched statuses to the gate. A PDB whose room grew (other drains' pods left, a
        replacement turned Ready) wakes the pods it refused, after each book's own short jitter."""
        before = {key: self.gate.room(key) for key in self.gate.statuses}
        self.gate.update(budgets, None if now is None else now.mono)
        if now is None:
            return
        self.share.saw(self.gate.statuses, now.mono)
        grown = {key for key in self.gate.statuses
                 if (room := self.gate.room(key)) is not None and room > 0 and room > (before.get(key) or 0)}
        if grown:
            lanes = {t.lane for t in self.plan.targets.values() if grown.intersection(t.pdbs)}
            self._wake(lanes, now.mono + pacing.LANE_WAKE_S * self.share.rand())

    def _replan(self, pods: list[dict[str, Any]], pdbs: list[dict[str, Any]] | None) -> None:
        if pods is self._planned and self._plan_key is not None and pdbs_key(pdbs) == self._plan_key[1]:
            return   # the very list planned last turn (a watch's unchanged snapshot), same PDBs
        self._planned, key = pods, plan_key(pods, pdbs)
        if key != self._plan_key:   # a PDB's status changing (most turns) leaves the plan as it is
            if self._plan_key is None or key[1] != self._plan_key[1]:
                self._covering, self._judged = {}, {}   # the PDBs changed: match their selectors again
            self.plan, self._plan_key = drain_plan(pods, pdbs, self._covering, self.rules, self._judged), key

    def _wake(self, lanes: set[str], at: float) -> None:
        self.share.wake(lanes, at)
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
        self.share.answered(answer.outcome, st.op, {new.pdb, *t.pdbs} - {""})
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

    def next_due(self, now: float) -> float | None:
        """The earliest moment (MonoTime) after ``now`` that time alone may let the book send more.
        Never one at or before it: what ``next_actions`` held back that is due already (no room, a
        lane busy, no slot) waits for an event, not a drain loop polling with timeout 0."""
        times = [st.retry_at for st in self.states.values() if st.phase == RETRY]
        times += self.share.moments()
        times += (since + STUCK_AFTER_S for since in self._gated_since.values())
        due = min((x for x in times if x > now), default=None)
        if self.throttled_until > now and (due is None or self.throttled_until > due):
            return self.throttled_until
        return due

    def in_flight(self) -> int:
        return sum(1 for st in self.states.values() if st.phase == IN_FLIGHT)

    def next_actions(self, now: Moment, inputs: Inputs, slots: int) -> tuple[list[Action], list[Emit]]:
        """The calls to send now and the events they imply: at most ``slots`` (the workers) in
        flight, and no more than the server's answers allow (``limit``, AIMD)."""
        self.limit.cap(slots)
        emits = [Emit(event, data) for event, data in policy_events(self.plan, self._policy_said, inputs.held_until)]
        self.share.tick(now.mono)
        if now.mono < self.throttled_until:
            return [], emits
        if self.past_evict_cutoff(now.wall, inputs):
            picks = self._after_cutoff(now, inputs, emits)
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

    def _lane_next(self, lane: Lane, now: Moment, inputs: Inputs,
                   past_cutoff: bool = False) -> tuple[str, str | None]:
        """(lane state, uid to send): state is done | stuck | busy; one eviction per lane at a time,
        never past a pod its PDB blocks, none while the watched budget has no room, and only this
        drain's share of the room (``pdb_share``). Past the cutoff checkpoint holds are lifted, and a
        stuck lane whose budget status stood still is asked (``PdbShare.quiet``)."""
        waiting = False
        for uid in lane.uids:
            st = self.states[uid]
            if st.phase in DONE:
                continue
            if st.phase == IN_FLIGHT:
                return "busy", None
            if now.wall < self.targets[uid].hold_until:
                continue   # its own policy keeps it: it holds up neither its lane nor the next tier
            if (now.wall < inputs.held_until.get(uid, 0.0)) if past_cutoff else self._held(uid, now.wall, inputs):
                waiting = True
                continue
            stuck = (not waiting and st.last == "blocked" and st.blocked_since is not None
                     and now.mono - st.blocked_since >= STUCK_AFTER_S)
            due = (st.phase == PENDING or st.retry_at <= now.mono) and not self.share.waiting(lane.key, now.mono)
            t = self.targets[uid]
            if self.gate.verdict(t.pdbs, t.pod) == CLOSED:   # (while it backs off too: no room all along)
                since = self._gated_since.setdefault(lane.key, now.mono)
                stuck = stuck or (not waiting and now.mono - since >= STUCK_AFTER_S)
                probe = due and past_cutoff and stuck and self.share.quiet(t.pdbs, now.mono)
                return ("stuck" if stuck else "busy"), (uid if probe else None)
            self._gated_since.pop(lane.key, None)
            if due and not self.share.send(lane.key, t.pdbs, self._room(t.pdbs), now.mono):
                due = False
            return ("stuck" if stuck else "busy"), (uid if due else None)
        return ("busy" if waiting else "done"), None

    def take_left_under(self) -> set[str]:
        """The PDBs a pod of the node left from since the last call (room may be back: read them)."""
        keys, self.left_under = self.left_under, set()
        return keys

    def waited_on(self) -> frozenset[str]:
        """The PDBs ("ns/name") with no room in this drain's view that hold back a pod still to
        move: the ones worth reading again (``pdb_poll``)."""
        keys = {k for uid, t in self.plan.targets.items()
                if (st := self.states.get(uid)) is not None and st.phase in (PENDING, RETRY) for k in t.pdbs}
        return frozenset(k for k in keys if (room := self.gate.room(k)) is not None and room <= 0)

    def _room(self, pdbs: tuple[str, ...]) -> int | None:
        rooms = [r for k in pdbs if (r := self.gate.room(k)) is not None]
        return min(rooms) if rooms else None

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

    def _after_cutoff(self, now: Moment, inputs: Inputs, emits: list[Emit]) -> list[tuple[str, str]]:
        """The order is lifted -- tiers, checkpoint holds -- but not a PDB's pace under ``report``: a
        refusal changes nothing there but costs the server about an accepted eviction (eviction.go
        ``checkAndDecrement`` under ``EvictionsRetry``). Under ``delete`` all go at once: a PDB's
        refusal is what turns a pod into a DELETE."""
        picks: list[tuple[str, str]] = []
        for lane in self.plan.lanes:
            if self.pdb_blocked == "report" and lane.key.startswith("pdb:"):
                state, uid = self._lane_next(lane, now, inputs, past_cutoff=True)
                if uid is not None:
                    picks.append((uid, "evict"))
                self._report_lane(lane, state == "stuck", now, emits)
                continue
            for uid in lane.uids:
                pick = self._lifted(uid, now, emits)
                if pick is not None:
                    picks.append((uid, pick))
        return picks

    def _lifted(self, uid: str, now: Moment, emits: list[Emit]) -> str | None:
        """The op to send for a pod no lane holds back any more (None: nothing now)."""
        st = self.states[uid]
        if st.phase == PENDING:
            return "evict"
        if st.phase != RETRY:
            return None
        if st.last not in REPORT_AFTER:
            return (st.op or "evict") if st.retry_at <= now.mono else None
        if self.pdb_blocked == "delete" and (st.last in DELETE_AFTER or st.op == "delete"):
            # (op "delete": the PDB's refusal already decided it; a failed delete is retried)
            return "delete" if st.op != "delete" or st.retry_at <= now.mono else None
        self._report(uid, now, emits)
        return "evict" if st.retry_at <= now.mono else None

    def _report_lane(self, lane: Lane, stuck: bool, now: Moment, emits: list[Emit]) -> None:
        """A pod its PDB refused is reported once; every pod waiting behind it too when the lane is
        stuck (the same budget holds them; they are not sent to hear it)."""
        for uid in lane.uids:
            st = self.states[uid]
            if st.phase in DONE or st.phase == IN_FLIGHT or st.reported:
                continue
            if (st.phase == RETRY and st.last in REPORT_AFTER) or stuck:
                self._report(uid, now, emits, self._gated_since.get(lane.key))

    def _report(self, uid: str, now: Moment, emits: list[Emit], since: float | None = None) -> None:
        st = self.states[uid]
        if not st.reported:
            self.states[uid] = st = dataclasses.replace(st, reported=True)
            emits.append(self._blocked_event(uid, st, now, since))

    def _blocked_event(self, uid: str, st: PodState, now: Moment, gated_since: float | None = None) -> Emit:
        t = self.targets[uid]
        since = next((x for x in (st.blocked_since, gated_since) if x is not None), now.mono)
        return Emit("drain.eviction_blocked", {
            "pod": t.key, "uid": uid, "pdb": st.pdb or t.pdb, "attempts": st.attempts,
            "blocked_for_ms": round((now.mono - since) * 1000), "error": st.error or "no room in the PDB's watched status (not sent)",
            "since_received_ms": round((now.wall - self.received_at) * 1000)})
