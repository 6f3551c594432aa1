"""The spool's intake bookkeeping: what to write, whom to acknowledge, which resends to drop.

No sockets, no files, no clock: the process feeds it messages and write
outcomes, and sends the acknowledgements it hands back.

- ``parse_event`` turns one ROUTER message into (sender, event_id, payload),
  or raises ``Rejected`` -- foreign frames, bad JSON, non-events, NaN, lone
  surrogates: anything that is not one event Vector can take as one NDJSON
  line. The payload is re-encoded, so it is always exactly one line.
- ``Intake`` holds the events of the current round (and of every round the
  disk refused) until they are durable, then acknowledges each to every
  sender that sent it. Events already durable and sent again (the sender
  missed the ack) are acknowledged without being written again, as long as
  they are among the ``recent`` ids.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import ujson

from common import ipc

# The Vector source's framing.newline_delimited.max_length: a longer line is refused
# there, so a larger event is cut down here, where the loss can be said out loud.
MAX_RECORD = 65536 - 1
MAX_ID = 128
MAX_TYPE = 128
# Resends come 2 s after a send that was not acknowledged; 4096 ids is more
# than the agent emits in that window even mid-drain, at ~0.6 MB. Older
# resends are written again: a harmless duplicate (consumers dedupe on event_id).
RECENT_IDS = 4096
# Events held in memory while the disk refuses writes. Their senders keep them
# too (unacknowledged), so this only bounds what is written the moment space
# returns, without waiting for the resends.
HOLD_LIMIT = 2000
ACK_CHUNK = 1000   # ids per ack message: 1000 * ~40 bytes stays far below ipc.MAX_MESSAGE
ENVELOPE = ("event_id", "seq", "ts", "node", "hall", "source", "type", "notice_id")
OWN = b""          # the sender of the spool's own events: nobody to acknowledge


class Rejected(ValueError):
    """A message that is not one storable event; counted (by ``reason``) and dropped, never acknowledged.

    Reasons: those of ``ipc.BadMessage``, and bad_shape (no id or type), not_encodable
    (NaN, lone surrogates), too_large (over a record even without its data).
    """

    def __init__(self, detail: str, reason: str = "bad_shape") -> None:
        super().__init__(detail)
        self.reason = reason


def encode(event: dict[str, Any]) -> bytes:
    """One line of JSON; raises Rejected for what Vector's json codec would refuse."""
    try:
        return ujson.dumps(event, ensure_ascii=False, escape_forward_slashes=False,
                           allow_nan=False).encode("utf-8")
    except (OverflowError, UnicodeError, TypeError, ValueError) as e:
        raise Rejected(f"event cannot be encoded as JSON: {e}", "not_encodable") from None


def fit(event: dict[str, Any], payload: bytes, limit: int) -> bytes:
    """The payload, or, over ``limit``, the envelope with ``data`` replaced by what was cut."""
    if len(payload) <= limit:
        return payload
    slim = {k: event[k] for k in ENVELOPE if k in event}
    slim["data"] = {"spool_truncated_bytes": len(payload)}
    out = encode(slim)
    if len(out) > limit:
        raise Rejected(f"event of {len(payload)} bytes is too large even without its data", "too_large")
    return out


def parse_event(frames: list[bytes], limit: int = MAX_RECORD) -> tuple[bytes, str, bytes]:
    """(sender identity, event_id, payload) of one intake message, else Rejected."""
    if len(frames) < 2:
        raise Rejected("no sender identity", "frames")
    try:
        topic, body = ipc.decode(frames[1:])
    except ipc.BadMessage as e:
        raise Rejected(str(e), e.reason) from None
    if topic != ipc.T_EVENT:
        raise Rejected(f"topic {topic!r} on the event intake", "topic")
    event_id, type_ = body.get("event_id"), body.get("type")
    if not isinstance(event_id, str) or not 0 < len(event_id) <= MAX_ID:
        raise Rejected("event_id must be a string of 1..128 characters")
    if not isinstance(type_, str) or not 0 < len(type_) <= MAX_TYPE:
        raise Rejected("type must be a string of 1..128 characters")
    return frames[0], event_id, fit(body, encode(body), limit)


@dataclass(slots=True)
class Held:
    payload: bytes
    senders: list[bytes]   # OWN for the spool's own events


class Intake:
    """Events not yet durable, ids recently made durable, and acknowledgements to send."""

    def __init__(self, recent_limit: int = RECENT_IDS, hold_limit: int = HOLD_LIMIT) -> None:
        self.recent_limit = recent_limit
        self.hold_limit = hold_limit
        self.recent: set[str] = set()
        self._order: deque[str] = deque()
        self.held: dict[str, Held] = {}   # arrival order is write order
        self.acks: dict[bytes, list[str]] = {}
        self.resends = 0    # events acknowledged again without a write
        self.let_go = 0     # held events dropped from memory by the bound (their senders still have them)

    def offer(self, sender: bytes, event_id: str, payload: bytes) -> None:
        if event_id in self.recent:
            self.resends += 1
            if sender != OWN:
                self.acks.setdefault(sender, []).append(event_id)
            return
        held = self.held.get(event_id)
        if held is not None:
            if sender not in held.senders:
                held.senders.append(sender)
            return
        self.held[event_id] = Held(payload, [sender])
        if len(self.held) > self.hold_limit:
            self._let_go()

    def remember(self, event_ids: list[str]) -> None:
        """Ids already durable in the spool file (read at start): a sender replaying one of them
        (its journal, after a crash) is acknowledged without a second copy in the ring."""
        for eid in event_ids[-self.recent_limit:]:
            if eid not in self.recent:
                self.recent.add(eid)
                self._order.append(eid)
        while len(self._order) > self.recent_limit:
            self.recent.discard(self._order.popleft())

    def batch(self) -> list[tuple[str, bytes]]:
        """Everything held, oldest first: what the next write must make durable."""
        return [(eid, h.payload) for eid, h in self.held.items()]

    def written(self, event_ids: list[str]) -> None:
        """These events are durable: remember them and acknowledge them to their senders."""
        # The hot path of every round: locals instead of attribute lookups, _remember inlined.
        pop, acks, recent, order = self.held.pop, self.acks, self.recent, self._order
        for eid in event_ids:
            held = pop(eid, None)
            if held is None:
                continue
            recent.add(eid)
            order.append(eid)
            for sender in held.senders:
                if sender != OWN:
                    ids = acks.get(sender)
                    if ids is None:
                        ids = acks[sender] = []
                    ids.append(eid)
        while len(order) > self.recent_limit:
            recent.discard(order.popleft())

    def refit(self, limit: int) -> None:
        """Cut held events down to a smaller record limit (a spool file made with another size)."""
        for held in self.held.values():
            if len(held.payload) > limit:
                held.payload = fit(ujson.loads(held.payload), held.payload, limit)

    def take_acks(self) -> list[tuple[bytes, list[str]]]:
        out = [(sender, ids[i:i + ACK_CHUNK]) for sender, ids in self.acks.items()
               for i in range(0, len(ids), ACK_CHUNK)]
        self.acks = {}
        return out

    def _let_go(self) -> None:
        """Drop the oldest sender event (they resend it); the spool's own only if nothing else is left."""
        victim = next((eid for eid, h in self.held.items() if OWN not in h.senders), None)
        if victim is None:
            victim = next(iter(self.held))
        del self.held[victim]
        self.let_go += 1
