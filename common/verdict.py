"""The verdict: the verifier's one judgement of a notice, and its outcomes (pure; re-exported by
common.wire with every other record that crosses a process boundary)."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ujson

DONE, OVERRUN = "done", "overrun"
# Verdicts of their own kind: a dry run did nothing to judge; an ignored kind was not drained;
# "unverified": the executor says empty but the verifier's own read of the scheduler does not
# agree or failed (``reason`` says which), so it is never called done; "volumes_attached": the
# node was empty in time, but volumes the evicted pods used were still attached to it when the
# margin ran out (``volumes`` names them; DESIGN section 9): a StatefulSet's replacement elsewhere
# waits for them (aws-ebs-csi-driver #1955), so the drain is not "done".
DRY_RUN, IGNORED, UNVERIFIED, VOLUMES_ATTACHED = "dry_run", "ignored", "unverified", "volumes_attached"
# "cordoned": a cordon-only policy's notice, the node cordoned by the cutoff (the verifier's read
# agrees); its work was left in place, so it is not "done" (the node was never emptied).
CORDONED = "cordoned"
OUTCOMES = (DONE, OVERRUN, DRY_RUN, IGNORED, UNVERIFIED, VOLUMES_ATTACHED, CORDONED)

# What the drain did to each pod it touched (``PodLine.outcome``), in the order a verdict lists
# them: what an owner must act on first. "still_there": on the node when the verdict was given.
POD_OUTCOMES = ("still_there", "deleted", "skipped", "held", "extended", "blocked", "evicted")
# A verdict travels as one spool record (spool.intake.MAX_RECORD, 64 KiB, with its envelope): its
# pod list takes what the rest of the record leaves of VERDICT_BYTES, and counts what it cut.
VERDICT_BYTES = 60 * 1024
MAX_PODS = 500                   # pods listed at most, however short their names
MAX_VOLUMES = 32                 # volumes named at most (``volumes_count`` is exact)


@dataclass(frozen=True, slots=True)
class PodLine:
    """One pod the drain touched, as a verdict lists it: its key (namespace/name), what happened
    to it last, when (RFC 3339), and why it was held first, if it was ("extended", the pod's own
    policy, "pdb_blocked"): a pod held and then evicted reads ``evicted``, held ``extended``."""

    pod: str
    outcome: str                 # one of POD_OUTCOMES
    at: str                      # RFC 3339
    held: str = ""

    def to_dict(self) -> dict[str, str]:
        d = {"pod": self.pod, "outcome": self.outcome, "at": self.at}
        if self.held:
            d["held"] = self.held
        return d

    @classmethod
    def from_dict(cls, d: Any) -> PodLine | None:
        """None for what is not a pod line (dropped, counted by the reader)."""
        if (not isinstance(d, dict) or not all(isinstance(d.get(k), str) for k in ("pod", "at"))
                or d.get("outcome") not in POD_OUTCOMES or not isinstance(d.get("held", ""), str)):
            return None
        return cls(d["pod"], d["outcome"], d["at"], d.get("held", ""))


def pod_order(line: PodLine) -> tuple[int, str, str]:
    return POD_OUTCOMES.index(line.outcome), line.at, line.pod


def fit_pods(lines: list[PodLine], room: int) -> tuple[PodLine, ...]:
    """The first of ``lines`` (in ``pod_order``) whose encoding fits ``room`` bytes, at most MAX_PODS."""
    out: list[PodLine] = []
    for line in sorted(lines, key=pod_order)[:MAX_PODS]:
        cost = _size(line.to_dict()) + 1
        if cost > room:
            break
        out.append(line)
        room -= cost
    return tuple(out)


def _size(value: Any) -> int:
    return len(ujson.dumps(value, ensure_ascii=False, escape_forward_slashes=False).encode("utf-8"))


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
    volumes: tuple[str, ...] = ()   # for volumes_attached: what was still attached
    detach_ms: int | None = None    # how long after the node was empty its volumes were seen gone

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
    # Kubernetes only: the node's attached volumes after it was empty (DESIGN section 9).
    detach_ms: int | None = None          # how long they took to go (None: none was waited for)
    volumes: tuple[str, ...] = ()         # still attached at the verdict, the first MAX_VOLUMES
    volumes_count: int = 0                # how many were, exactly
    # Every pod the drain touched, and what became of it (``fit_pods``); ``pods_count`` is exact.
    pods: tuple[PodLine, ...] = ()
    pods_count: int = 0

    @classmethod
    def of(cls, verdict: Verdict, *, max_left: int, pods: list[PodLine] | None = None,
           pods_count: int | None = None, **judged_on: Any) -> VerdictRecord:
        """``verdict`` with what it was judged on (kind, channel, timeline_ms, issued_at, ...), and
        the pods the drain touched, cut to what the record's bytes leave (``pods_count``: how many
        there were, when more than ``pods`` lists)."""
        rec = cls(outcome=verdict.outcome, notice_id=verdict.notice_id, at=verdict.at,
                  held_up_by=verdict.held_up_by, left=verdict.left[:max_left], finished_at=verdict.finished_at,
                  reason=verdict.reason, left_count=len(verdict.left), detach_ms=verdict.detach_ms,
                  volumes=verdict.volumes[:MAX_VOLUMES], volumes_count=len(verdict.volumes), **judged_on)
        rec = rec._within(VERDICT_BYTES // 2)
        lines = pods or []
        total = max(len(lines), pods_count or 0)
        if not total:
            return rec
        room = VERDICT_BYTES - _size(dataclasses.replace(rec, pods_count=total).to_dict())
        return dataclasses.replace(rec, pods=fit_pods(lines, room), pods_count=total)

    def _within(self, limit: int) -> VerdictRecord:
        """This record cut to ``limit`` bytes, leaving the rest of VERDICT_BYTES to its pods: the
        timeline's checkpoint acks go first (``checkpoint_acks_total`` keeps their count), then
        the tail of ``left`` (``left_count`` is exact). The outcome, its reason and times stay."""
        rec = self
        acks = list(rec.timeline_ms.get("checkpoint_acks") or ())
        while acks and _size(rec.to_dict()) > limit:
            acks = acks[:len(acks) // 2]
            tl = dict(rec.timeline_ms, checkpoint_acks=acks)
            tl.setdefault("checkpoint_acks_total", len(self.timeline_ms["checkpoint_acks"]))
            rec = dataclasses.replace(rec, timeline_ms=tl)
        left = list(rec.left)
        while left and _size(rec.to_dict()) > limit:
            left = left[:len(left) // 2]
            rec = dataclasses.replace(rec, left=tuple(left))
        return rec

    @property
    def verdict(self) -> Verdict:
        return Verdict(self.outcome, self.notice_id, self.at, self.held_up_by, self.left, self.finished_at,
                       self.reason, self.volumes, self.detach_ms)

    @property
    def pods_truncated(self) -> int:
        """Pods the drain touched that the record does not list (cut to fit)."""
        return max(0, self.pods_count - len(self.pods))

    def to_dict(self) -> dict[str, Any]:
        d = self.verdict.to_dict()
        d.update(kind=self.kind, channel=self.channel, timeline_ms=self.timeline_ms, left_count=self.left_count,
                 left=list(self.left), issued_at=self.issued_at, cutoff=self.cutoff, deadline=self.deadline,
                 margin_s=self.margin_s)
        if self.late_ms is not None:
            d["late_ms"] = self.late_ms
        if self.detach_ms is not None:
            d["detach_ms"] = self.detach_ms
        if self.volumes_count:
            d.update(volumes=list(self.volumes), volumes_count=self.volumes_count)
        if self.pods_count:
            d.update(pods=[p.to_dict() for p in self.pods], pods_count=self.pods_count,
                     pods_truncated=self.pods_truncated)
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
    "detach_ms": (lambda x: x is None or (isinstance(x, int) and not isinstance(x, bool)), None),
    "volumes": (_strings, []),
    "volumes_count": (_count, None),   # None: as many as ``volumes`` lists
    "pods": (lambda x: isinstance(x, list), []),
    "pods_count": (_count, None),      # None: as many as ``pods`` lists
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
    fields["volumes"] = tuple(fields["volumes"])
    lines = [PodLine.from_dict(p) for p in fields["pods"]]
    if None in lines:
        bad.append("pods")
    fields["pods"] = tuple(p for p in lines if p is not None)
    for key, listed in (("left_count", "left"), ("volumes_count", "volumes"), ("pods_count", "pods")):
        if fields[key] is None:
            fields[key] = len(fields[listed])
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


# -- the verdicts as news (topic ``verdict``, verifier -> watcher) ------------------------------

def encode_verdict_news(verdicts: dict[str, VerdictRecord], ids: Any) -> dict[str, Any]:
    """The ``verdict`` message: the outcome of each of ``ids`` (the active notices) judged so far.
    Level-triggered, re-sent every second with ``escalate``; bounded as the active notices are
    (common.notice_state), a few dozen bytes each."""
    return {"notices": {nid: {"outcome": verdicts[nid].outcome, "at": verdicts[nid].at}
                        for nid in ids if nid in verdicts}}


class BadNews(ValueError):
    """A ``verdict`` message without its 'notices' object."""

    reason = "bad_shape"   # the counter label, as common.wire.BadRecord's


def decode_verdict_news(body: Any) -> dict[str, str]:
    """notice id -> outcome; entries of another shape are skipped, a body without 'notices' refused
    (BadNews)."""
    notices = body.get("notices") if isinstance(body, dict) else None
    if not isinstance(notices, dict):
        raise BadNews("verdict: 'notices' is not an object")
    return {str(nid): v["outcome"] for nid, v in notices.items()
            if isinstance(v, dict) and v.get("outcome") in OUTCOMES}
