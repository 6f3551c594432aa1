"""What a drain did to each pod it touched: ``PodFate``, kept per notice in the drain record
(``common.wire.DrainRecord.pods``, executor.json and the progress message), and how the executor's
events about a pod change it (pure). The verifier lists them in the verdict (common.verdict.PodLine;
issue 28, point 8: an owner can tell which of its jobs to restart, aws-node-termination-handler #359).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from common.events import EventType
from common.timefmt import MAX_EPOCH, MIN_EPOCH

# What the drain did to a pod (``PodFate.outcome``; common.verdict.POD_OUTCOMES but "still_there",
# which only the verifier says): the executor's event that says it -> the outcome.
POD_EVENTS = {"drain.evicted": "evicted", "drain.deleted": "deleted", "drain.pod_skipped": "skipped",
              "drain.pod_held": "held", "drain.eviction_blocked": "blocked"}
_HOLDS = ("held", "extended", "blocked")   # an outcome that may still give way to another


@dataclass(frozen=True, slots=True)
class PodFate:
    """What the drain did to one pod last, when (epoch), and why it was held first, if it was."""

    outcome: str
    at: float
    held: str = ""

    def then(self, outcome: str, at: float, reason: str) -> PodFate:
        """This fate after ``outcome``: why it was held is remembered under what follows the hold."""
        return PodFate(outcome, at, (reason or self.held) if outcome in _HOLDS else self.held)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"outcome": self.outcome, "at": self.at}
        if self.held:
            d["held"] = self.held
        return d

    @classmethod
    def decode_all(cls, d: Mapping[str, Any]) -> dict[str, PodFate]:
        """The pods' fates (``DrainRecord.pods`` as written); an entry of the wrong shape is dropped
        alone (the record stays usable)."""
        return {str(k): cls(v["outcome"], float(v["at"]), v.get("held", "") if isinstance(v.get("held", ""), str) else "")
                for k, v in d.items()
                if isinstance(v, dict) and isinstance(v.get("outcome"), str) and _epoch(v.get("at"))}


def _epoch(x: object) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            and MIN_EPOCH <= x < MAX_EPOCH)


def pod_fate(old: PodFate | None, event: EventType, data: Mapping[str, Any], at: float) -> PodFate | None:
    """A pod's fate after the executor's ``event`` about it (``data``), or None if the event is not
    about a pod's fate. A pod evicted or deleted stays so: a late "held" does not undo it."""
    outcome = POD_EVENTS.get(event)
    if outcome is None or not isinstance(data.get("pod"), str):
        return None
    reason = str(data.get("reason") or ("pdb_blocked" if outcome == "blocked" else ""))[:40]
    if outcome == "held" and reason == "extended":
        outcome = "extended"
    if old is None:
        return PodFate(outcome, at, reason if outcome in _HOLDS else "")
    if old.outcome in ("evicted", "deleted") and outcome in _HOLDS:
        return old
    return old.then(outcome, at, reason)


def note_pod(ledgers: Iterable[dict[str, PodFate]], event: EventType, data: Mapping[str, Any], at: float) -> bool:
    """The executor's ``event`` about a pod into each of ``ledgers`` (``DrainRecord.pods``: the
    drain's own, and those of the notices it serves: each notice's verdict names the pods touched
    while it was active); True if it was about a pod's fate."""
    key = data.get("pod")
    if not isinstance(key, str) or event not in POD_EVENTS:
        return False
    for pods in ledgers:
        fate = pod_fate(pods.get(key), event, data, at)
        if fate is not None:
            pods[key] = fate
    return True
