"""The drain core: the recipe every drain follows, whatever the scheduler.

Each turn of the executor's loop (``turn``), for every notice active on this node:

1. **start the record** the first time the notice is seen -- on the contract heard
   from the watcher, whose budget and choices the drain keeps to its end -- and save
   it before ``drain.started`` is announced, so a restart never starts it twice;
2. **tell the clients** on the agent socket: once the node is cordoned, or
   ``TELL_CLIENTS_AFTER_S`` after receipt whatever the scheduler does;
3. **advance the scheduler** with an ``Order``: what to do (the policy for the
   notice's kind), by when (``common.wire.phase_ends``), how far the verifier has
   escalated, which pods still checkpoint.

A withdrawn notice: its clients are told, and the scheduler gets a ``Withdrawal``.
Then, whenever the scheduler reports (``on_reports``), **apply its reports** to the
records, and **finish**: an end state stops the advancing. Records are saved
(``executor.json``) and published for the verifier as they change.

No I/O here but through what the executor hands in: the scheduler, the clients
and its ``Shell`` (the log, the spool, the state file, ``executor.pub``). The clock
is passed in.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from common.contract import BUILTIN, Contract, fallback_at
from common.notice import Notice
from common.timefmt import format_rfc3339
from common.wire import Ack, DrainRecord, DrainState, Step
from executor.extension import extend_limit
from executor.scheduler import (
    Announce,
    InPhase,
    Log,
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

if TYPE_CHECKING:
    from common.log import Logger
    from executor.clients import Clients

TELL_CLIENTS_AFTER_S = 2.0   # tell clients at the latest this long after receipt, cordoned or not
SAVE_EVERY_S = 0.2           # per-pod progress is saved at most this often (steps and states at once)


class Shell(Protocol):
    """What the core asks of the executor's process."""

    log: Logger

    def emit(self, type: str, notice_id: str, data: dict[str, Any], now: float) -> object:
        """Send an event to the spool."""

    def save(self) -> None:
        """Write every record to executor.json."""

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
        self.unsaved, self.saved_at = False, 0.0

    @property
    def busy(self) -> bool:
        return any(r.state == DrainState.RUNNING for r in self.records.values())

    # -- the recipe --------------------------------------------------------------------------
    def turn(self, now: float) -> None:
        for n in list(self.active.values()):
            rec = self.records.get(n.id) or self._start(n, now)
            if rec is None:
                continue
            self._tell_clients(n, rec, now)
            if rec.state == DrainState.RUNNING and self.scheduler is not None:
                self.scheduler.advance(self._order(n, rec), now)
        for nid in self.withdrawn:
            self._withdraw(nid, now)
        if self.clients is not None:
            self.clients.tell()   # after the withdrawals: a client they governed hears "withdrawn" first
        self._collect_acks(now)

    def on_reports(self, now: float) -> None:
        if self.scheduler is None:
            return
        changed = False
        for r in self.scheduler.reports():
            changed = self._apply(r, now) or changed
        if changed:
            self.shell.publish()
            self.unsaved = True
        # A restart re-reads the scheduler anyway (an evicted pod shows as terminating), so
        # per-pod progress need not hit the disk at once.
        if self.unsaved and now - self.saved_at >= SAVE_EVERY_S:
            self.save_now(now)

    def save_now(self, now: float) -> None:
        self.unsaved, self.saved_at = False, now
        self.shell.save()

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
        self.shell.emit("drain.started", n.id, {"kind": n.kind, "policy": rec.policy}, now)
        if rec.state == DrainState.IGNORED:
            self._announce(n.id, "drain.ignored", {"kind": n.kind, "detail": n.detail,
                                                   "contract_serial": rec.contract_serial}, now)
        return rec

    # -- 2. tell the clients -------------------------------------------------------------
    def _tell_clients(self, n: Notice, rec: DrainRecord, now: float) -> None:
        """Announce the notice on the agent socket (idempotent: an unchanged notice is not re-sent)."""
        if self.clients is None or rec.state == DrainState.WITHDRAWN or rec.policy != "drain":
            return
        # Cordon first, so nothing new lands while workloads checkpoint; but never let a slow or
        # unreachable scheduler keep the workloads from hearing the notice for long.
        if (Step.CORDONED not in rec.steps and Step.FALLBACK not in rec.steps
                and now - rec.received_at < TELL_CLIENTS_AFTER_S):
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
                       rec, now)

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
                     budget=rec.budget, ends=rec.ends(n.deadline), cordon_only=rec.policy != "drain",
                     taint_key=rec.taint_key, pdb_blocked=rec.pdb_blocked, exclude_from_lb=rec.exclude_from_lb,
                     steps_done=frozenset(rec.steps), memo=rec.memo, level=self.levels.get(n.id),
                     held=held, hold_all=hold_all, contract=self.contract,
                     held_until=self.clients.extended() if self.clients is not None else {},
                     fallback_allowed=rec.fallback_allowed, fallback_at=fallback_at(n.deadline, rec.fallback_lead_s))

    def _withdraw(self, nid: str, now: float) -> None:
        if self.clients is not None:
            self.clients.withdraw(nid)
        rec = self.records.get(nid)
        if rec is None or rec.state == DrainState.WITHDRAWN or self.scheduler is None:
            return
        self.scheduler.withdraw(Withdrawal(nid, rec.taint_key, frozenset(rec.steps), rec.memo,
                                           others_active=bool(self.active.keys() - {nid})), now)

    # -- 4. apply its reports, finish ------------------------------------------------------
    def _apply(self, r: Report, now: float) -> bool:
        """One report onto its record; True if the record changed."""
        if isinstance(r, Log):
            (self.log.info if r.level == "info" else self.log.warning)(r.name, notice_id=r.notice_id, **r.data)
            return False
        rec = self.records.get(r.notice_id)
        if rec is None:
            if isinstance(r, Remember) and r.saved is not None:
                r.saved.set()   # nothing to keep it in: do not hold the scheduler up
            return False
        return _APPLY[type(r)](self, r, rec, now)

    def _on_step(self, r: StepDone, rec: DrainRecord, now: float) -> bool:
        if r.event:
            self._step(r, rec, now)
        else:
            rec.steps[r.step] = now
        return True

    def _on_announce(self, r: Announce, rec: DrainRecord, now: float) -> bool:
        self._announce(r.notice_id, r.event, r.data, now)
        return False

    def _on_remaining(self, r: Remaining, rec: DrainRecord, now: float) -> bool:
        rec.remaining = list(r.items)
        return True

    def _on_phase(self, r: InPhase, rec: DrainRecord, now: float) -> bool:
        rec.phase = r.phase
        return True

    def _on_state(self, r: NewState, rec: DrainRecord, now: float) -> bool:
        if rec.state == DrainState.WITHDRAWN or (r.state != DrainState.WITHDRAWN and r.notice_id in self.withdrawn):
            return False   # a late report from a drain that was stopped
        rec.state = r.state
        self.save_now(now)
        return True

    def _on_remember(self, r: Remember, rec: DrainRecord, now: float) -> bool:
        rec.memo = dict(r.memo)
        if r.saved is not None:
            self.save_now(now)
            r.saved.set()
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

    def _step(self, r: StepDone, rec: DrainRecord, now: float) -> None:
        """A step done: recorded, saved, announced, published."""
        rec.steps[r.step] = now
        self.save_now(now)
        data = dict(r.data, since_received_ms=round((now - rec.received_at) * 1000))
        self._announce(r.notice_id, r.event, data, now)
        self.shell.publish()

    def _announce(self, nid: str, event: str, data: dict[str, Any], now: float) -> None:
        self.log.info(event, notice_id=nid, **data)
        self.shell.emit(event, nid, data, now)


# Each report onto a record (Log has no record: _apply handles it first).
_APPLY: dict[type, Callable[[Drains, Any, DrainRecord, float], bool]] = {
    StepDone: Drains._on_step, Announce: Drains._on_announce, Remaining: Drains._on_remaining,
    InPhase: Drains._on_phase, NewState: Drains._on_state, Remember: Drains._on_remember,
    Problem: Drains._on_problem}
