"""The verdict: the verifier's one judgement of a notice, and its outcomes (pure; re-exported by
common.wire with every other record that crosses a process boundary)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DONE, OVERRUN = "done", "overrun"
# Verdicts of their own kind: a dry run did nothing to judge; an ignored kind was not drained;
# "unverified": the executor says empty but the verifier's own read of the scheduler does not
# agree or failed (``reason`` says which), so it is never called done.
DRY_RUN, IGNORED, UNVERIFIED = "dry_run", "ignored", "unverified"
# "cordoned": a cordon-only policy's notice, the node cordoned by the cutoff (the verifier's read
# agrees); its work was left in place, so it is not "done" (the node was never emptied).
CORDONED = "cordoned"
OUTCOMES = (DONE, OVERRUN, DRY_RUN, IGNORED, UNVERIFIED, CORDONED)


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


@dataclass(frozen=True, slots=True)
class VerdictRecord:
    """A verdict as the verifier keeps it (verdicts.json, by notice id) and announces it (the data
    of its drain.done / drain.overrun / ... event): the ``Verdict``, and the notice and clock it
    was judged on. ``to_dict`` / ``decode_verdict`` are its one codec; agentctl reads it so too."""

    outcome: str                 # one of OUTCOMES ("" in a record whose outcome was unreadable)
    notice_id: str
    at: float
    held_up_by: str = ""
    left: tuple[str, ...] = ()   # what was left, the first ``max_left`` of it
    finished_at: float = 0.0
    reason: str = ""
    kind: str = ""
    channel: str = ""
    timeline_ms: dict[str, Any] = field(default_factory=dict)   # verifier.timeline
    left_count: int = 0          # how much was left, exactly
    issued_at: str = ""          # RFC 3339, as the clock had them
    cutoff: str = ""
    deadline: str = ""
    margin_s: float = 0.0
    late_ms: int | None = None   # how long after the cutoff the node was empty, when it was

    @classmethod
    def of(cls, verdict: Verdict, *, max_left: int, **judged_on: Any) -> VerdictRecord:
        """``verdict`` with what it was judged on (kind, channel, timeline_ms, issued_at, ...)."""
        return cls(outcome=verdict.outcome, notice_id=verdict.notice_id, at=verdict.at,
                   held_up_by=verdict.held_up_by, left=verdict.left[:max_left], finished_at=verdict.finished_at,
                   reason=verdict.reason, left_count=len(verdict.left), **judged_on)

    @property
    def verdict(self) -> Verdict:
        return Verdict(self.outcome, self.notice_id, self.at, self.held_up_by, self.left, self.finished_at,
                       self.reason)

    def to_dict(self) -> dict[str, Any]:
        d = self.verdict.to_dict()
        d.update(kind=self.kind, channel=self.channel, timeline_ms=self.timeline_ms, left_count=self.left_count,
                 left=list(self.left), issued_at=self.issued_at, cutoff=self.cutoff, deadline=self.deadline,
                 margin_s=self.margin_s)
        if self.late_ms is not None:
            d["late_ms"] = self.late_ms
        return d


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _strings(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(s, str) for s in x)


# field -> (the test its value must pass, its value when absent or failing it)
_FIELDS: dict[str, tuple[Callable[[Any], bool], Any]] = {
    **{k: (lambda x: isinstance(x, str), "") for k in (
        "notice_id", "held_up_by", "reason", "kind", "channel", "issued_at", "cutoff", "deadline")},
    "outcome": (lambda x: x in OUTCOMES, ""),
    **dict.fromkeys(("at", "finished_at", "margin_s"), (_number, 0.0)),
    "left": (_strings, []),
    "timeline_ms": (lambda x: isinstance(x, dict), {}),
    "left_count": (_count, None),   # None: as many as ``left`` lists
    "late_ms": (lambda x: x is None or (isinstance(x, int) and not isinstance(x, bool)), None),
}


def decode_verdict(d: Any) -> tuple[VerdictRecord | None, tuple[str, ...]]:
    """A kept or announced verdict read back: (the record, the fields that had the wrong type and
    read as empty); None for what is not an object at all.

    Lenient by design, field by field: a notice whose verdict is kept at all is judged, and must
    never be judged a second time because one field of its record was damaged. A record written
    by an older agent reads whole (tests/verifier/fixtures holds one written by 0bc60c5)."""
    if not isinstance(d, dict):
        return None, ()
    bad = []
    fields: dict[str, Any] = {}
    for key, (ok, default) in _FIELDS.items():
        value = d.get(key, default)
        if value is not default and not ok(value):
            bad.append(key)
            value = default
        fields[key] = value
    fields["at"], fields["finished_at"], fields["margin_s"] = (
        float(fields[k]) for k in ("at", "finished_at", "margin_s"))
    fields["left"], fields["timeline_ms"] = tuple(fields["left"]), dict(fields["timeline_ms"])
    if fields["left_count"] is None:
        fields["left_count"] = len(fields["left"])
    return VerdictRecord(**fields), tuple(bad)


def decode_verdicts(doc: Any) -> tuple[dict[str, VerdictRecord], dict[str, str]]:
    """verdicts.json's ``verdicts`` table: (the records by notice id, what was wrong by notice id --
    the entries dropped, not objects, and those read with damaged fields)."""
    out: dict[str, VerdictRecord] = {}
    problems: dict[str, str] = {}
    for nid, d in (doc.items() if isinstance(doc, dict) else ()):
        rec, bad = decode_verdict(d)
        if rec is None:
            problems[nid] = f"not an object: {type(d).__name__}"
            continue
        out[nid] = rec
        if bad:
            problems[nid] = "fields of the wrong type read as empty: " + ", ".join(bad)
    return out, problems
