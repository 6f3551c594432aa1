"""The drain core: the recipe every drain follows, whatever the scheduler.

A node has one drain, however many notices are active (DESIGN.md section 9, "Many
notices at once"): ``executor.governing`` picks the notice that governs it (the
earliest deadline) and the notices it serves. Each turn of the executor's loop
(``turn``):

1. **start the record** of every notice the first time it is seen -- on the contract
   heard from the watcher, whose budget and choices the drain keeps to its end -- and
   save it before ``drain.started`` is announced, so a restart never starts it twice;
   **start a deferred drain** whose time has come (``_begin_due``, below);
2. **tell the clients** on the agent socket: once the node is cordoned, or
   ``TELL_CLIENTS_AFTER_S`` after receipt whatever the scheduler does;
3. **bring the served records up to the drain** (``executor.served``): what the governing
   drain did (its steps, what is left, its phase, its memory) is what every notice it
   serves sees, so each still gets its own verdict, naming what held it up;
4. **advance the scheduler** with the governing notice's ``Order``: what to do (the
   policy for its kind), by when (``common.wire.phase_ends``), how far the verifier
   has escalated, which pods still checkpoint. When a more urgent notice arrives,
   the next order names it, and the scheduler hands the drain over.

**When the drain starts** (a deferred drain waits, cordoned, for ``deadline - budget_s``; a
cordon-only kind never moves work): ``executor.drain_start``.

A withdrawn notice: its clients are told, and the scheduler gets a ``Withdrawal``
that undoes what the drain did to the node only if no other active notice still
wants it (``Withdrawal.keep``). Then, whenever the scheduler reports (``on_reports``),
**apply its reports** to the records -- the governing drain's to every notice it
serves -- and **finish**: an end state stops the advancing. Records are saved
(``executor.json``) and published for the verifier as they change.

No I/O here but through what the executor hands in: the scheduler, the clients
and its ``Shell`` (the log, the spool, the state file, ``executor.pub``). The clock
is passed in, both of them (``common.clock``): ``now`` is the wall clock (records, events,
deadlines), ``mono`` the monotonic one for the two intervals here -- "tell the clients after
``TELL_CLIENTS_AFTER_S``" and "save at most every ``SAVE_EVERY_S``" -- so a wall clock stepped back
neither holds the clients' notice nor the saves for as long as the step.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from common.clock import MonoTime, WallTime
from common.contract import BUILTIN, Contract, fallback_at
from common.events import EventType
from common.notice import Notice
from common.pod_fate import note_pod
from common.timefmt import format_rfc3339
from common.wire import Ack, DrainRecord, DrainState, Step
from executor.drain_start import cordon_only, cordoned_state, deferred_started, due, want_of
from executor.extension import extend_limit
from executor.governing import Candidate, Service, Want, serve
from executor.scheduler import (
    Announce,
    InPhase,
    Log,
    Marker,
    NewState,
    Order,
    Problem,
    Remaining,
    Remember,
    Report,
    Scheduler,
    StepDone,
    Withdrawal,
)
from executor.served import SHARED_ENDS, catch_up

if TYPE_CHECKING:
    from common.log import Logger
    from executor.clients import Clients

TELL_CLIENTS_AFTER_S = 2.0   # tell clients at the latest this long after receipt, cordoned or not
SAVE_EVERY_S = 0.2           # per-pod progress is saved at most this often (steps and states at once)


class Shell(Protocol):
    """What the core asks of the executor's process."""

    log: Logger

    def emit(self, type: EventType, notice_id: str, data: dict[str, Any], now: float) -> object:
        """Send an event to the spool."""

    def save(self) -> bool:
        """Write every record to executor.json; True once it is durably there."""

    def publish(self) -> None:
        """Send every record on executor.pub."""


class Drains:
    """Every drain of this node: the records (the only writer) and the recipe above."""

    def __init__(self, scheduler: Scheduler | None, clients: Clients | None, shell: Shell,
                 records: dict[str, DrainRecord], dry_run: bool = False) -> None:
        self.scheduler, self.clients, self.shell = scheduler, clients, shell
        self.log = shell.log
        self.records = records
        self.dry_run = dry_run
        self.active: dict[str, Notice] = {}
        self.withdrawn: frozenset[str] = frozenset()
        self.levels: dict[str, str] = {}   # notice id -> the verifier's escalation level
        # The built-in contract until the watcher publishes the signed one (within a second). A new
        # drain starts only once the watcher's contract has been heard: it sends the contract before
        # the notice in every announcement, so this costs nothing but closes the window in which a
        # restarted executor would start a drain on the built-in budget.
        self.contract: Contract = BUILTIN
        self.contract_heard = False
        self.unsaved, self.saved_at = False, MonoTime(float("-inf"))
        self.mono = MonoTime(0.0)                  # the monotonic clock as of the last turn
        self.first_seen: dict[str, MonoTime] = {}  # notice id -> when this process first saw it
        self.service = Service()   # the node's one drain, as of the last turn

    @property
    def busy(self) -> bool:
        return any(r.state == DrainState.RUNNING for r in self.records.values())

    # -- the recipe --------------------------------------------------------------------------
    def turn(self, now: WallTime, mono: MonoTime) -> None:
        self.mono = mono
        # A notice whose record an earlier run left counts as seen long enough (its clients are told).
        self.first_seen = {nid: self.first_seen.get(nid, MonoTime(mono - TELL_CLIENTS_AFTER_S) if nid in self.records else mono)
                           for nid in self.active}
        for n in list(self.active.values()):
            rec = self.records.get(n.id) or self._start(n, now)
            if rec is not None:
                self._begin_due(n, rec, now)
                self._tell_clients(n, rec, now)
        self._take_over(now)
        self._bring_up(now)
        gov = self.service.governing
        if gov is not None and self.scheduler is not None:
            self.scheduler.advance(self._order(self.active[gov], self.records[gov]), now)
        for nid in self.withdrawn:
            self._withdraw(nid, now)
        if self.clients is not None:
            self.clients.tell()   # after the withdrawals: a client they governed hears "withdrawn" first
        self._collect_acks(now)

    def on_reports(self, now: WallTime, mono: MonoTime) -> None:
        self.mono = mono
        if self.scheduler is None:
            return
        changed = False
        for r in self.scheduler.reports():
            changed = self._apply(r, now) or changed
        if changed:
            self._bring_up(now)
            self.shell.publish()
            self.unsaved = True
        # A restart re-reads the scheduler anyway (an evicted pod shows as terminating), so
        # per-pod progress need not hit the disk at once.
        if self.unsaved and mono - self.saved_at >= SAVE_EVERY_S:
            self.save_now(now)

    def save_now(self, now: float) -> bool:
        """Every record to disk; True once it is durably there."""
        self.unsaved, self.saved_at = False, self.mono
        return self.shell.save()

    # -- the node's one drain ----------------------------------------------------------------
    def _serve(self) -> Service:
        return serve(Candidate(nid, n.deadline, want_of(rec), rec.state == DrainState.RUNNING)
                     for nid, n in self.active.items()
                     if nid not in self.withdrawn and (rec := self.records.get(nid)) is not None)

    def _take_over(self, now: float) -> None:
        """The node's drain for this turn. A notice that takes it over starts where the drain was
        (cordoned, what is left, its memory), so nothing is done twice and its record never reads
        emptier than the node; its own runner then marks the node for it."""
        prev = self.service.governing
        self.service = self._serve()
        gov = self.service.governing
        if (gov is None or prev is None or gov == prev or prev not in self.records
                or self.records[prev].state != DrainState.RUNNING):
            return   # nothing taken over: a drain that ended (or was withdrawn) leaves nothing to go on from
        if self._catch_up(gov, self.records[gov], prev, self.records[prev], now):
            self.save_now(now)
            self.shell.publish()
            self.service = self._serve()   # a cordon-only notice may have got all it wants

    def _served(self) -> list[tuple[str, DrainRecord]]:
        """The running records the governing drain works for, itself excluded."""
        out = []
        for nid in self.service.served[1:]:
            rec = self.records.get(nid)
            if rec is not None and rec.state == DrainState.RUNNING and nid in self.active and nid not in self.withdrawn:
                out.append((nid, rec))
        return out

    def _bring_up(self, now: float) -> None:
        """Every served record up to the governing drain: its steps (announced where a drain of its
        own would announce them), what is left, its phase, its memory -- so a notice that takes the
        drain over carries on where it was, and each verdict names what held its notice up."""
        gov_id = self.service.governing
        gov = self.records.get(gov_id) if gov_id is not None else None
        if gov_id is None or gov is None:
            return
        changed = False
        for nid, rec in self._served():
            changed = self._catch_up(nid, rec, gov_id, gov, now) or changed
        if changed:
            self.save_now(now)
            self.shell.publish()

    def _catch_up(self, nid: str, rec: DrainRecord, gov_id: str, gov: DrainRecord, now: float) -> bool:
        """One served record up to the governing one (executor.served); True if it changed."""
        changed, said = catch_up(rec, gov_id, gov, now)
        for event, data in said:
            self._announce(nid, event, data, now)
        return changed

    # -- 1. start the record -------------------------------------------------------------
    def _start(self, n: Notice, now: float) -> DrainRecord | None:
        if not self.contract_heard:
            return None
        rec = self.records[n.id] = DrainRecord.start(n, self.contract)
        if rec.policy == "ignore":
            # Nothing at all is done for it: no cordon, no clients told, no scheduler call.
            rec.state = DrainState.IGNORED
        # Saved before it is announced: an executor killed in between must not start (and
        # announce) the same drain again.
        self.save_now(now)
        data: dict[str, Any] = {"kind": n.kind, "policy": rec.policy}
        if rec.policy == "drain":
            data.update(start=rec.drain_start, starts_at=format_rfc3339(rec.begins_at(n.deadline)))
        self.shell.emit("drain.started", n.id, data, now)
        if rec.state == DrainState.IGNORED:
            self._announce(n.id, "drain.ignored", {"kind": n.kind, "detail": n.detail,
                                                   "contract_serial": rec.contract_serial}, now)
        return rec

    def _begin_due(self, n: Notice, rec: DrainRecord, now: float) -> None:
        """A deferred drain whose start has come wants the node drained from now on (drain_start.due):
        the step saved, then announced. A withdrawn notice never starts."""
        if n.id in self.withdrawn or not due(rec, n.deadline, now):
            return
        data = deferred_started(n, rec, now)
        rec.steps[Step.DEFERRED_STARTED] = now
        rec.state = DrainState.RUNNING
        self.save_now(now)
        self._announce(n.id, "drain.deferred_started", data, now)
        self.shell.publish()

    # -- 2. tell the clients -------------------------------------------------------------
    def _tell_clients(self, n: Notice, rec: DrainRecord, now: float) -> None:
        """Announce the notice on the agent socket (idempotent: an unchanged notice is not re-sent)."""
        if self.clients is None or rec.state == DrainState.WITHDRAWN or want_of(rec) != Want.DRAIN:
            return   # a deferred drain's clients hear of it when it starts: their work runs until then
        # Cordon first, so nothing new lands while workloads checkpoint; but never let a slow or
        # unreachable scheduler keep the workloads from hearing the notice for long.
        # (Timed from this process's first sight of the notice, on the monotonic clock.)
        if (Step.CORDONED not in rec.steps and Step.FALLBACK not in rec.steps
                and self.mono - self.first_seen.get(n.id, self.mono) < TELL_CLIENTS_AFTER_S):
            return
        told = Step.CLIENTS_TOLD in rec.steps
        if not self.dry_run:
            self.clients.announce({"id": n.id, "kind": n.kind, "deadline": format_rfc3339(n.deadline),
                                   "checkpoint_by": format_rfc3339(rec.ends(n.deadline).checkpoint_by),
                                   "extend_limit": format_rfc3339(extend_limit(n.deadline, rec.budget))})
        elif not told:
            # Workloads would checkpoint (and maybe stop) on a notice: a dry run must not tell them.
            data = {"action": "tell_clients", "clients": self.clients.count()}
            self._announce(n.id, "drain.dry_run", data, now)
        if not told:
            self._step(StepDone(n.id, Step.CLIENTS_TOLD, "drain.clients_told", {"clients": self.clients.count()}),
                       rec, now, "drain.clients_told")

    def _collect_acks(self, now: float) -> None:
        if self.clients is None:
            return
        for ack in self.clients.acks():
            rec = self.records.get(ack.notice_id)
            if rec is not None:
                rec.acks[ack.key] = Ack(ack.status, now)
                self.save_now(now)
            self._announce(ack.notice_id, "drain.checkpoint_acked", ack.data, now)

    # -- 3. advance the scheduler --------------------------------------------------------
    def _order(self, n: Notice, rec: DrainRecord) -> Order:
        held, hold_all = self.clients.holds(n.id) if self.clients is not None else (frozenset(), False)
        return Order(notice_id=n.id, kind=n.kind, deadline=n.deadline, received_at=rec.received_at,
                     budget=rec.budget, ends=rec.ends(n.deadline), cordon_only=cordon_only(rec, self.dry_run),
                     taint_key=rec.taint_key, pdb_blocked=rec.pdb_blocked, exclude_from_lb=rec.exclude_from_lb,
                     steps_done=frozenset(rec.steps), memo=rec.memo, level=self.levels.get(n.id),
                     held=held, hold_all=hold_all, contract=self.contract,
                     held_until=self.clients.extended() if self.clients is not None else {},
                     fallback_allowed=rec.fallback_allowed, fallback_at=fallback_at(n.deadline, rec.fallback_lead_s), source=n.source)

    def _withdraw(self, nid: str, now: float) -> None:
        if self.clients is not None:
            self.clients.withdraw(nid)
        rec = self.records.get(nid)
        if rec is None or rec.state == DrainState.WITHDRAWN or self.scheduler is None:
            return
        # Undo only what no active notice still wants; while one does, the marks name the governing one.
        keep = self.service.marking - {nid}
        marker = None
        if keep and self.service.marker in self.active:
            n = self.active[self.service.marker]
            marker = Marker(n.id, n.kind, n.deadline, n.source)
        self.scheduler.withdraw(Withdrawal(nid, rec.taint_key, frozenset(rec.steps), rec.memo,
                                           others_active=bool(keep), keep=frozenset(keep), marker=marker), now)

    # -- 4. apply its reports, finish ------------------------------------------------------
    def _apply(self, r: Report, now: float) -> bool:
        """One report onto its record; True if the record changed."""
        if isinstance(r, Log):
            (self.log.info if r.level == "info" else self.log.warning)(r.name, notice_id=r.notice_id, **r.data)
            return False
        rec = self.records.get(r.notice_id)
        if rec is None:
            if isinstance(r, Announce) and not r.notice_id:   # of the scheduler itself (a worker restarted)
                self._announce("", r.event, r.data, now)
            if isinstance(r, Remember) and r.saved is not None:
                r.saved.set()   # nothing to keep it in: do not hold the scheduler up
            return False
        return _APPLY[type(r)](self, r, rec, now)

    def _on_step(self, r: StepDone, rec: DrainRecord, now: float) -> bool:
        if r.event is not None:
            self._step(r, rec, now, r.event)
        else:
            rec.steps[r.step] = now
        return True

    def _on_announce(self, r: Announce, rec: DrainRecord, now: float) -> bool:
        self._announce(r.notice_id, r.event, r.data, now)
        return note_pod([rec.pods, *(o.pods for _, o in self._served())], r.event, r.data, now)  # verdicts' pods

    def _on_remaining(self, r: Remaining, rec: DrainRecord, now: float) -> bool:
        rec.remaining = list(r.items)
        return True

    def _on_phase(self, r: InPhase, rec: DrainRecord, now: float) -> bool:
        rec.phase = r.phase
        return True

    def _on_state(self, r: NewState, rec: DrainRecord, now: float) -> bool:
        if rec.state == DrainState.WITHDRAWN or (r.state != DrainState.WITHDRAWN and r.notice_id in self.withdrawn):
            return False   # a late report from a drain that was stopped
        if r.state == DrainState.CORDONED_ONLY and rec.policy == "drain":
            # The cordon a deferred drain asked for before its start: it waits for it -- or, its start
            # come while the cordon was made, runs on (the next order moves work).
            if rec.begun():
                return False
            rec.state = DrainState.WAITING
            if r.notice_id == self.service.governing:
                self._bring_up(now)   # what it served wanted the cordon only too: they have it
            self.save_now(now)
            return True
        rec.state = r.state
        if r.notice_id == self.service.governing and r.state in SHARED_ENDS:
            # The node's one drain ended: so did every notice it served (by its own policy).
            self._bring_up(now)
            for _, other in self._served():
                other.state = (cordoned_state(other) if r.state == DrainState.DONE and want_of(other) != Want.DRAIN
                               else r.state)
        self.save_now(now)
        return True

    def _on_remember(self, r: Remember, rec: DrainRecord, now: float) -> bool:
        rec.memo = dict(r.memo)
        if r.saved is not None:
            r.saved.set(self.save_now(now))
        return True

    def _on_problem(self, r: Problem, rec: DrainRecord, now: float) -> bool:
        if r.reason == rec.problem:
            return False
        rec.problem = r.reason
        rec.steps[Step.CONFIG_ERROR] = now
        self.save_now(now)
        self.log.error("drain.config_error", notice_id=r.notice_id, reason=r.reason)
        self.shell.emit("drain.config_error", r.notice_id, {"reason": r.reason}, now)
        return True

    def _step(self, r: StepDone, rec: DrainRecord, now: float, event: EventType) -> None:
        """A step done: recorded, saved, announced, published."""
        rec.steps[r.step] = now
        self.save_now(now)
        data = dict(r.data, since_received_ms=round((now - rec.received_at) * 1000))
        self._announce(r.notice_id, event, data, now)
        self.shell.publish()

    def _announce(self, nid: str, event: EventType, data: dict[str, Any], now: float) -> None:
        self.log.info(event, notice_id=nid, **data)
        self.shell.emit(event, nid, data, now)


# Each report onto a record (Log has no record: _apply handles it first).
_APPLY: dict[type, Callable[[Drains, Any, DrainRecord, float], bool]] = {
    StepDone: Drains._on_step, Announce: Drains._on_announce, Remaining: Drains._on_remaining,
    InPhase: Drains._on_phase, NewState: Drains._on_state, Remember: Drains._on_remember,
    Problem: Drains._on_problem}
