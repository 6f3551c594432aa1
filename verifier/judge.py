"""The verifier's pure core: for one notice, is it done, overrun, or still open?

``judge`` looks at the notice, the executor's latest progress and the clock,
and returns at most one verdict. The verifier persists verdicts, so a notice
is judged exactly once even across restarts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.notice import Notice

DEFAULT_MARGIN_S = 5.0


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: str                 # "done" | "overrun"
    notice_id: str
    at: float                    # when the verdict was reached (our clock)
    held_up_by: str = ""         # for overrun: the step that did not finish
    left: tuple[str, ...] = ()   # for overrun: what was still on the node

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "notice_id": self.notice_id, "at": self.at,
                "held_up_by": self.held_up_by, "left": list(self.left)}


def cutoff(notice: Notice, margin_s: float) -> float:
    """The moment the node must be empty by: the deadline less the contract's margin.

    A notice that arrived after its own cutoff (late delivery, skewed clock)
    is still drained; it is judged by what happens, never dropped.
    """
    return notice.deadline - margin_s


def judge(notice: Notice, progress: dict[str, Any] | None, margin_s: float, now: float) -> Verdict | None:
    steps = (progress or {}).get("steps") or {}
    state = (progress or {}).get("state")
    limit = cutoff(notice, margin_s)
    finished_at = steps.get("node_empty")
    if state == "cordoned_only" and "cordoned" in steps:
        finished_at = steps["cordoned"]
    if finished_at is not None:
        if finished_at <= limit:
            return Verdict("done", notice.id, now)
        return Verdict("overrun", notice.id, now, held_up_by="late", left=())
    if now < limit:
        return None
    if "cordoned" not in steps:
        held = "cordon"
    else:
        held = "evict"
    left = tuple((progress or {}).get("remaining") or ())
    return Verdict("overrun", notice.id, now, held_up_by=held, left=left)
