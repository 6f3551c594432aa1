"""A notice's timeline: every moment that matters, as milliseconds after the provider issued it.

Pure: built from the notice, the channels that brought it, the executor's
drain record and (once there is one) the verdict. Used in the verdict
event and in ``sco-agentctl status`` for a drain still running. Offsets can
be negative when the provider's clock runs ahead of ours; they are reported
as they are rather than hidden.
"""
from __future__ import annotations

import math
from typing import Any

from common.notice import Notice
from common.timefmt import format_rfc3339
from common.verdict import PodLine
from common.wire import DrainRecord, Step

# Acks listed one by one, so an event stays small on a node of a thousand clients.
MAX_ACKS = 200
# Executor steps shown, in drain order: (timeline key, progress step).
STEP_KEYS = (
    ("cordoned", Step.CORDONED),
    ("clients_told", Step.CLIENTS_TOLD),
    ("last_eviction", Step.EVICTED),
    ("last_delete", Step.DELETED),
    ("last_requeue", Step.REQUEUED),
    ("last_signal", Step.SIGNALLED),
    ("fallback", Step.FALLBACK),
    ("node_empty", Step.NODE_EMPTY),
)


def offset_ms(at: Any, issued_at: float) -> int | None:
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at <= 0:
        return None
    return round((at - issued_at) * 1000)


def timeline(notice: Notice, rec: DrainRecord | None,
             arrivals: dict[str, float] | None = None, verdict_at: float | None = None,
             escalations: dict[str, float] | None = None) -> dict[str, Any]:
    """``{"issued": 0, "received": {channel: ms}, "cordoned": ms, ..., "verdict": ms}``; unknown moments left out."""
    t0 = notice.issued_at
    out: dict[str, Any] = {"issued": 0, "received": _received(notice, arrivals or {})}
    steps = rec.steps if rec is not None else {}
    for key, step in STEP_KEYS:
        ms = offset_ms(steps.get(step), t0)
        if ms is not None:
            out[key] = ms
    acks = _acks(rec, t0)
    if acks:
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


def _received(notice: Notice, arrivals: dict[str, float]) -> dict[str, int]:
    """When each channel first brought the notice, in order of arrival."""
    first = dict(arrivals)
    if notice.received_at:
        first.setdefault(notice.channel, notice.received_at)
    received: dict[str, int] = {}
    for channel, at in sorted(first.items(), key=lambda kv: kv[1]):
        ms = offset_ms(at, notice.issued_at)
        if ms is not None:
            received[str(channel)] = ms
    return received


def _acks(rec: DrainRecord | None, t0: float) -> list[dict[str, Any]]:
    """Every checkpoint ack with a usable time, earliest first."""
    acks: list[dict[str, Any]] = []
    for client, ack in (rec.acks if rec is not None else {}).items():
        ms = offset_ms(ack.at, t0)
        if ms is not None:
            acks.append({"client": client, "status": ack.status, "ms": ms})
    acks.sort(key=lambda a: a["ms"])
    return acks


def pod_lines(rec: DrainRecord | None, left: tuple[str, ...], verdict_at: float) -> tuple[list[PodLine], int]:
    """Every pod the drain touched, with what became of it and when, and each pod ``left`` on the
    node at the verdict as "still_there" (a pod held, then still there, keeps why it was held);
    with how many pods there were in all (the progress message may have cut some: ``pods_cut``).
    So an owner can tell which of its jobs to restart (aws-node-termination-handler #359)."""
    fates = rec.pods if rec is not None else {}
    lines: dict[str, PodLine] = {}
    for key, fate in fates.items():
        lines[key] = PodLine(key, fate.outcome, format_rfc3339(fate.at), fate.held)
    at = format_rfc3339(verdict_at)
    for key in left:
        if "/" not in key or ":" in key:   # not a pod: "node:unreachable" and the like
            continue
        old = lines.get(key)
        if old is not None and old.outcome == "skipped":
            continue   # left in place on purpose, and said so
        held = old.held or (old.outcome if old.outcome in ("held", "extended", "blocked") else "") if old else ""
        lines[key] = PodLine(key, "still_there", at, held)
    return list(lines.values()), len(lines) + (rec.pods_cut if rec is not None else 0)
