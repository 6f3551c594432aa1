"""The verdict: the verifier's one judgement of a notice, and its outcomes (pure; re-exported by
common.wire with every other record that crosses a process boundary)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DONE, OVERRUN = "done", "overrun"
# Verdicts of their own kind: a dry run did nothing to judge; an ignored kind was not drained;
# "unverified": the executor says empty but the verifier's own read of the scheduler does not
# agree or failed (``reason`` says which), so it is never called done.
DRY_RUN, IGNORED, UNVERIFIED = "dry_run", "ignored", "unverified"
OUTCOMES = (DONE, OVERRUN, DRY_RUN, IGNORED, UNVERIFIED)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The verifier's one judgement of a notice (the core of its drain.done / drain.overrun /
    drain.unverified / ... event)."""

    outcome: str                 # one of OUTCOMES
    notice_id: str
    at: float                    # when the verdict was reached (our clock)
    held_up_by: str = ""         # for overrun: the step in progress at the cutoff (common.wire.HELD_UP_BY)
    left: tuple[str, ...] = ()   # for overrun / unverified: what was still on the node
    finished_at: float = 0.0     # when the node was empty (0: not seen)
    reason: str = ""             # why, in words, when the outcome needs one (config error, unverified)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"outcome": self.outcome, "notice_id": self.notice_id, "at": self.at,
                             "held_up_by": self.held_up_by, "left": list(self.left),
                             "finished_at": self.finished_at}
        if self.reason:
            d["reason"] = self.reason
        return d
