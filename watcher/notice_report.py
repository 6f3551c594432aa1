"""What the watcher says about what it hears: the event (and log line) each outcome of observing a
notice is reported as, and how its throttled reports are said. Pure but for the callables passed in.
"""
from __future__ import annotations

from typing import Any, Literal, Protocol

from common.events import EventType
from watcher.notice_book import Outcome

# What the watcher says through its throttled reports: an event type, or the relay's drop line
# (said as the event ``relay.error``).
Report = EventType | Literal["relay.slow_consumer"]


class _Emit(Protocol):
    def __call__(self, type: EventType, notice_id: str = "", data: dict[str, Any] | None = None) -> object: ...

# What the throttled reports are logged at; the event type is the log message, except
# the relay's, whose errors and drops share one event type.
REPORT_LEVEL = {"notice.ignored": "info"}


def describe(outcome: Outcome, now: float) -> tuple[EventType, str, dict[str, Any]] | None:
    """(event type, notice id, data) for one outcome, or None when there is nothing to say.
    ``notice.ignored`` is said once a minute per reason (the caller's recorder), not per notice."""
    n = outcome.notice
    if outcome.action == "new":
        d = n.to_dict()
        return "notice.received", n.id, {
            "kind": n.kind, "channel": n.channel, "source": n.source, "detail": n.detail,
            "issued_at": d["issued_at"], "deadline": d["deadline"], "received_at": round(n.received_at, 3),
            "late": n.deadline < now}
    if outcome.action == "duplicate" and outcome.first_on_channel and outcome.earlier is not None:
        # The first arrival stays the receive time; another channel's first arrival is recorded once.
        held = outcome.earlier
        return "notice.duplicate", held.id, {
            "channel": n.channel, "id_on_channel": n.id, "received_at": round(n.received_at or now, 3),
            "after_first_ms": round(((n.received_at or now) - held.received_at) * 1000)}
    if outcome.action == "withdrawn":
        return "notice.withdrawn", n.id, {"kind": n.kind}
    if outcome.action == "ignored" and outcome.reason != "withdrawn":
        # A flood of distinct ids (another node's notices misrouted to us) is counted in full but
        # logged once, with the count.
        return "notice.ignored", n.id, {"reason": outcome.reason, "node": n.node[:200], "channel": n.channel}
    return None


def say(log: Any, emit: _Emit, type_: Report, data: dict[str, Any]) -> None:
    """A throttled report (common/recorder.py): a log line and a spool event of what was counted."""
    notice_id = data.pop("notice_id", "")
    where = data.pop("log_only", {})
    level = log.info if REPORT_LEVEL.get(type_) == "info" else log.warning
    level(type_, **({"notice_id": notice_id} if notice_id else {}), **data, **where)
    emit("relay.error" if type_ == "relay.slow_consumer" else type_, notice_id, data)
