"""The notice: what every channel produces, whatever the provider.

A notice is a frozen record of JSON-safe fields. Its identity is a pure
function of what the provider said, so the same reclaim seen on the relay and
in instance metadata, or on every 5 s poll, is one notice. Validation of the
relay payload (DESIGN section 3) lives here because the ``sco`` metadata
endpoint returns the same payload.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import ujson

from common.timefmt import MAX_EPOCH, MIN_EPOCH, format_rfc3339, parse_rfc3339

# A notice's times keep a day's room inside what common.timefmt can write (years 0001..9999),
# so every time computed from one -- a cutoff, a checkpoint_by: the deadline less a budget of
# at most an hour -- can be written and read back too. A deadline long past is still a notice
# (late is better than never): it drains at once.
ROOM_S = 86400.0

KINDS = ("reclaim", "rebalance", "maintenance", "live_migration", "pause", "cancel")
CHANNELS = ("relay", "metadata", "local")
MAX_RELAY_PAYLOAD = 8192
_MAX_FIELD = 256


@dataclass(frozen=True, slots=True)
class Notice:
    """One announcement that the provider will take (or may take) this instance."""

    id: str
    kind: str            # reclaim | rebalance | maintenance | live_migration | pause | cancel
    node: str
    instance_id: str
    issued_at: float     # epoch seconds, provider's clock
    deadline: float      # epoch seconds, provider's clock
    source: str          # provider: aws | gcp | azure | sco | <relay source>
    channel: str = "relay"       # which channel brought it first
    received_at: float = 0.0     # our clock, first arrival on any channel
    detail: str = ""             # provider-specific action, e.g. "terminate", "Preempt"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["issued_at"] = format_rfc3339(self.issued_at)
        d["deadline"] = format_rfc3339(self.deadline)
        return d

    def with_arrival(self, channel: str, received_at: float) -> Notice:
        return replace(self, channel=channel, received_at=received_at)

    def is_for(self, node: str) -> bool:
        """Is this notice for ``node``: named, or sent to every node of the hall ("*")?"""
        return self.node in (node, "*")


def notice_time(epoch: float, what: str = "time") -> float:
    """``epoch`` if a notice may carry it (a day inside years 0001..9999 UTC), else ValueError."""
    if not MIN_EPOCH + ROOM_S <= epoch < MAX_EPOCH - ROOM_S:
        raise ValueError(f"{what} ({epoch:.0f} s after the epoch) is within a day of the years 0001..9999")
    return epoch


def notice_from_dict(d: dict[str, Any]) -> Notice:
    """Inverse of ``Notice.to_dict`` (for state files and IPC); ValueError on bad data."""
    if not isinstance(d, dict):
        raise ValueError(f"bad notice record: not an object ({type(d).__name__})")  # noqa: TRY004 -- one error type for every bad record
    try:
        received_at = float(d.get("received_at", 0.0))
        # Our own clock, but through a message: inf, NaN or 1e308 would poison every duration
        # computed from it (round() raises). Any time that can be written down is fine.
        if not (math.isfinite(received_at) and MIN_EPOCH <= received_at < MAX_EPOCH):
            raise ValueError(f"received_at is not a time: {received_at}")
        return Notice(
            id=str(d["id"]), kind=str(d["kind"]), node=str(d["node"]),
            instance_id=str(d.get("instance_id", "")),
            issued_at=notice_time(parse_rfc3339(d["issued_at"]), "issued_at"),
            deadline=notice_time(parse_rfc3339(d["deadline"]), "deadline"),
            source=str(d.get("source", "")), channel=str(d.get("channel", "relay")),
            received_at=received_at, detail=str(d.get("detail", "")),
        )
    except (KeyError, TypeError) as e:
        raise ValueError(f"bad notice record: {e}") from None


class Rejected(ValueError):
    """A payload that is not a notice. ``reason`` is one of a small fixed set (a metric label)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def parse_relay_payload(payload: bytes, limit: int = MAX_RELAY_PAYLOAD) -> Notice:
    """Validate a relay payload (DESIGN section 3) into a Notice, or raise Rejected."""
    if len(payload) > limit:
        raise Rejected("too_large", f"{len(payload)} bytes > {limit}")
    try:
        doc = ujson.loads(payload)
    except (ValueError, UnicodeDecodeError) as e:
        raise Rejected("bad_json", str(e)[:200]) from None
    return notice_from_payload(doc)


def notice_from_payload(doc: Any) -> Notice:
    if not isinstance(doc, dict):
        raise Rejected("bad_shape", "payload is not a JSON object")
    if doc.get("v") != 1:
        raise Rejected("bad_version", f"v must be 1, got {str(doc.get('v'))[:20]!r}")
    fields = {}
    for name in ("id", "kind", "node", "issued_at", "deadline"):
        value = doc.get(name)
        if not isinstance(value, str) or not value:
            raise Rejected("bad_field", f"{name} must be a non-empty string")
        if len(value) > _MAX_FIELD:
            raise Rejected("bad_field", f"{name} longer than {_MAX_FIELD}")
        fields[name] = _unicode(name, value)
    for name in ("instance_id", "source"):
        value = doc.get(name, "")
        if not isinstance(value, str) or len(value) > _MAX_FIELD:
            raise Rejected("bad_field", f"{name} must be a string")
        fields[name] = _unicode(name, value)
    if fields["kind"] not in KINDS:
        raise Rejected("bad_kind", f"unknown kind {fields['kind'][:32]!r}")
    try:
        issued_at = notice_time(parse_rfc3339(fields["issued_at"]), "issued_at")
        deadline = notice_time(parse_rfc3339(fields["deadline"]), "deadline")
    except ValueError as e:
        raise Rejected("bad_time", str(e)) from None
    return Notice(
        id=fields["id"], kind=fields["kind"], node=fields["node"],
        instance_id=fields["instance_id"], issued_at=issued_at, deadline=deadline,
        source=fields["source"] or "relay",
    )


def _unicode(name: str, value: str) -> str:
    """``value`` if it is text UTF-8 can carry: JSON lets "\\ud800" (half a surrogate pair) through,
    and every message and state file that held it would fail to encode."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Rejected("bad_field", f"{name} is not valid Unicode (a lone surrogate)") from None
    return value


def derived_id(source: str, instance_id: str, kind: str, key: str) -> str:
    """A stable id for a notice the provider gave no id: same content, same id on every poll."""
    # Imported here: hashlib maps OpenSSL's libcrypto, and only the metadata poll (watcher) needs it.
    import hashlib

    digest = hashlib.sha256(f"{source}\0{instance_id}\0{kind}\0{key}".encode()).hexdigest()
    return f"{source}-{digest[:16]}"


def relay_subjects(hall: str, node: str) -> tuple[str, str]:
    """The per-node and hall-wide subjects (DESIGN section 3); '.' in a node name becomes '_'."""
    return f"sco.notice.{hall}.{node.replace('.', '_')}", f"sco.notice.{hall}.all"
