"""A notice's timeline: every moment that matters, as milliseconds after the provider issued it.

Pure: built from the notice, the channels that brought it, the executor's
progress record and (once there is one) the verdict. Used in the verdict
event and in ``sco-agentctl status`` for a drain still running. Offsets can
be negative when the provider's clock runs ahead of ours; they are reported
as they are rather than hidden.
"""
from __future__ import annotations

import math
from typing import Any

from common.notice import Notice

# Acks listed one by one, so an event stays small on a node of a thousand clients.
MAX_ACKS = 200
# Executor steps shown, in drain order: (timeline key, progress step).
STEP_KEYS = (
    ("cordoned", "cordoned"),
    ("clients_told", "clients_told"),
    ("last_eviction", "evicted"),
    ("last_delete", "deleted"),
    ("last_requeue", "requeued"),
    ("last_signal", "signalled"),
    ("fallback", "fallback"),
    ("node_empty", "node_empty"),
)


def offset_ms(at: Any, issued_at: float) -> int | None:
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at <= 0:
        return None
    return round((at - issued_at) * 1000)


def timeline(notice: Notice, progress: dict[str, Any] | None,
             arrivals: dict[str, float] | None = None, verdict_at: float | None = None,
             escalations: dict[str, float] | None = None) -> dict[str, Any]:
    """``{"issued": 0, "received": {channel: ms}, "cordoned": ms, ..., "verdict": ms}``; unknown moments left out."""
    t0 = notice.issued_at
    received: dict[str, int] = {}
    first = dict(arrivals or {})
    if notice.received_at:
        first.setdefault(notice.channel, notice.received_at)
    for channel, at in sorted(first.items(), key=lambda kv: kv[1]):
        ms = offset_ms(at, t0)
        if ms is not None:
            received[str(channel)] = ms
    out: dict[str, Any] = {"issued": 0, "received": received}
    progress = progress or {}
    steps = progress.get("steps") or {}
    for key, step in STEP_KEYS:
        ms = offset_ms(steps.get(step), t0)
        if ms is not None:
            out[key] = ms
    acks = []
    for client, ack in (progress.get("acks") or {}).items():
        if isinstance(ack, dict):
            ms = offset_ms(ack.get("at"), t0)
            if ms is not None:
                acks.append({"client": str(client), "status": str(ack.get("status", "")), "ms": ms})
    if acks:
        acks.sort(key=lambda a: a["ms"])
        out["checkpoint_acks"] = acks[:MAX_ACKS]
        if len(acks) > MAX_ACKS:
            out["checkpoint_acks_total"] = len(acks)
    for level, at in (escalations or {}).items():
        ms = offset_ms(at, t0)
        if ms is not None:
            out[f"escalated_{level}"] = ms
    if verdict_at is not None:
        out["verdict"] = offset_ms(verdict_at, t0)
    return out
