"""The event schema (DESIGN section 7): every step the agent takes is one event.

``make_event`` is pure (the clock and ids are passed in or drawn here once);
``Outbox`` is the sending side every process uses to get events into the
spool durably: it keeps each event until the spool acknowledges that the
event was written and synced, and resends what was not acknowledged, so a
spool SIGKILLed mid-stream loses nothing.
"""
from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, Protocol, TypeGuard, get_args

# The closed set of event types, defined once. Every emitting signature takes an ``EventType``,
# so mypy (run by tests/run.sh over every product package) rejects a misspelt type at its call
# site, rare path or not, instead of ``make_event`` raising in production, where the process
# would restart into the same path (tests/repo/test_event_types.py proves mypy does). Types
# read from disk or a socket are checked with ``is_event_type`` where they enter.
EventType = Literal[
    "agent.started", "agent.process_exited", "agent.config_error", "agent.thread_restarted",
    "notice.received", "notice.duplicate", "notice.rejected", "notice.ignored", "notice.withdrawn",
    "notice.ack_withheld",
    "metadata.error", "relay.error", "relay.connected", "relay.disconnected",
    "contract.accepted", "contract.rejected", "contract.builtin",
    "drain.started", "drain.cordoned", "drain.uncordoned", "drain.clients_told",
    "drain.checkpoint_acked", "drain.evicted", "drain.eviction_blocked", "drain.deleted",
    "drain.requeued", "drain.signalled", "drain.fallback", "drain.reconciled", "drain.error",
    "drain.escalated", "drain.node_empty", "drain.done", "drain.overrun", "drain.dry_run",
    "drain.fallback_started", "drain.config_error", "drain.ignored", "drain.plan",
    "drain.unverified", "drain.dry_run_judged", "drain.ignored_judged", "drain.eviction_unsupported",
    "drain.volumes_attached",
    # issue 28: extend (DESIGN §6), per-pod policy (DESIGN §9), pods kubectl refuses
    "drain.checkpoint_extended", "drain.extend_refused",
    "drain.pod_skipped", "drain.pod_held", "drain.pod_data_lost",
    # issue 28: a pod the agent deleted without its DisruptionTarget condition (the status write failed)
    "drain.disruption_target_failed",
    # issue 28: a deferred drain's start came (DESIGN §9); a cordon-only notice's verdict
    "drain.deferred_started", "drain.cordoned_judged",
    "verifier.clock_started",
    "ipc.rejected", "socket.rejected",
    "spool.dropped", "spool.recovered", "spool.io_error", "spool.ship_rejected", "spool.poison",
    "outbox.journal_error",
]
EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))


def is_event_type(value: object) -> TypeGuard[EventType]:
    """Is ``value`` one of the closed set? For types that come from disk or a socket."""
    return isinstance(value, str) and value in EVENT_TYPES


class EventSink(Protocol):
    """Where a part of a process sends its events (``SpoolLink.emit``; the spool's own events)."""

    def __call__(self, type: EventType, /, *, data: dict[str, Any]) -> object: ...


class NoticeEventSink(Protocol):
    """An ``EventSink`` that also names the notice (and the event's time): ``SpoolLink.emit``."""

    def __call__(self, type: EventType, notice_id: str = "", data: dict[str, Any] | None = None,
                 now: float | None = None) -> object: ...


class Origin(NamedTuple):
    """Who emits an event: the node, its hall, and the emitting process's per-start stamp."""

    node: str
    hall: str
    source: str


def make_event(
    type: EventType, origin: Origin, seq: int, *,
    notice_id: str = "", data: dict[str, Any] | None = None, now: float | None = None,
) -> dict[str, Any]:
    """Build one event record, with a fresh event id. An unknown type is a programming error that
    mypy rejects at the call site; checked here too for a caller that went around the types."""
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type!r}")
    ts = time.time() if now is None else now
    return {
        "event_id": uuid4(),
        "seq": seq,
        "ts": _rfc3339_ms(ts),
        "node": origin.node,
        "hall": origin.hall,
        "source": origin.source,
        "type": type,
        "notice_id": notice_id,
        "data": data or {},
    }


def uuid4() -> str:
    """A random (version 4) UUID string, as ``str(uuid.uuid4())`` gives, without importing uuid
    (and its _uuid extension) into every process for this one call."""
    b = bytearray(os.urandom(16))
    b[6] = b[6] & 0x0F | 0x40   # version 4
    b[8] = b[8] & 0x3F | 0x80   # RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _rfc3339_ms(epoch: float) -> str:
    # Inlined rather than via datetime: this runs for every event in every process.
    t = time.gmtime(epoch)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(epoch * 1000) % 1000:03d}Z"


class Outbox:
    """Events waiting for the spool's durable acknowledgement.

    Pure bookkeeping (no sockets): ``add`` returns the event to send, ``acked``
    forgets events, ``due()`` lists those to send again. The resend pacing is an
    interval, on ``clock`` (monotonic; an event's ``ts`` stays the wall clock's), so
    a wall clock stepped back does not hold resends for as long. The process's loop
    owns the DEALER socket. Memory is bounded: past ``limit`` the oldest
    pending events are dropped and counted (``dropped``), and the count is
    reported in the next event so the loss is never silent.
    """

    def __init__(self, source: str, node: str, hall: str, limit: int = 10000,
                 resend_after_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.clock = clock
        self.limit = limit
        self.resend_after_s = resend_after_s
        self.seq = 0
        # A per-start stamp keeps seq unique across restarts of this process.
        self.origin = Origin(node, hall, f"{source}-{os.getpid()}-{int(time.time())}")
        self.pending: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()   # id -> (sent, mono)
        self.dropped = 0

    def add(self, type: EventType, notice_id: str = "", data: dict[str, Any] | None = None,
            now: float | None = None, *, sent: float | None = None) -> dict[str, Any]:
        """``now``: the event's time (wall clock); ``sent``: when it is sent (``clock``, now if None)."""
        now = time.time() if now is None else now
        self.seq += 1
        data = dict(data or {})
        if self.dropped:
            data["outbox_dropped"] = self.dropped
        ev = make_event(type, self.origin, self.seq, notice_id=notice_id, data=data, now=now)
        self.pending[ev["event_id"]] = (self.clock() if sent is None else sent, ev)
        while len(self.pending) > self.limit:
            self.pending.popitem(last=False)
            self.dropped += 1
        return ev

    def restore(self, event: dict[str, Any], now: float) -> None:
        """Take back an event a previous run of this process emitted and the spool never acked
        (common.journal): the same event, id, source and seq, pending as if just sent (``now``: on
        ``clock``)."""
        self.pending[event["event_id"]] = (now, event)
        self.pending.move_to_end(event["event_id"])
        while len(self.pending) > self.limit:
            self.pending.popitem(last=False)
            self.dropped += 1

    def acked(self, event_ids: list[str]) -> int:
        n = 0
        for eid in event_ids:
            if self.pending.pop(eid, None) is not None:
                n += 1
        return n

    def due(self, now: float | None = None) -> list[dict[str, Any]]:
        """Events unacknowledged for longer than resend_after_s (``now``: on ``clock``, read if
        None), oldest first; their clock restarts."""
        now = self.clock() if now is None else now
        out = []
        # ``pending`` is kept in send-time order (new events are appended, resent ones move to
        # the end), so the walk stops at the first event that is not yet due.
        for (sent, ev) in self.pending.values():
            if now - sent < self.resend_after_s:
                break
            out.append(ev)
        for ev in out:
            self.pending[ev["event_id"]] = (now, ev)
            self.pending.move_to_end(ev["event_id"])
        return out
