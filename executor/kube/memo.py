"""The Kubernetes drain's memory across restarts: ``KubeMemo``, one typed record and its codec.

It travels in the drain record (``common.wire.DrainRecord.memo``, written flat into
``executor.json`` next to the record's own fields, as it always was), and is read and
written here only: the scheduler decodes it into the runner's ``DrainSpec``, the runner
keeps a ``KubeMemo`` and hands ``to_dict()`` to the core in ``Remember``. The shape is
the one earlier agents wrote, so a record from one reads as it is; ``reported_for`` is
new (absent: the record's own notice).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class BadMemo(ValueError):
    """The record's Kubernetes memory has the wrong shape (said by ``KubeMemo.problem``)."""


@dataclass(slots=True)
class KubeMemo:
    evicted: dict[str, str] = field(default_factory=dict)   # pod uid -> ns/name, eviction accepted
    deleted: dict[str, str] = field(default_factory=dict)   # pod uid -> ns/name, deleted by the agent
    reported: list[str] = field(default_factory=list)       # uids said PDB-blocked (drain.eviction_blocked)
    reported_for: str = ""                  # the notice they were said for ("": the record's own)
    fallback_started: float | None = None   # when the fallback was written down to start (epoch)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"evicted": dict(self.evicted), "deleted": dict(self.deleted),
                             "reported": list(self.reported)}
        if self.reported_for:
            d["reported_for"] = self.reported_for
        if self.fallback_started is not None:
            d["fallback_started"] = self.fallback_started
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KubeMemo:
        """The memory in a record's flat fields (other keys are the record's own); BadMemo if malformed."""
        bad = [k for k in ("evicted", "deleted") if not isinstance(d.get(k, {}), dict)]
        if not isinstance(d.get("reported", []), list):
            bad.append("reported")
        if not isinstance(d.get("reported_for", ""), str):
            bad.append("reported_for")
        started = d.get("fallback_started", 0.0)
        if isinstance(started, bool) or not isinstance(started, (int, float)) or not math.isfinite(started):
            bad.append("fallback_started")
        if bad:
            raise BadMemo(f"wrong type: {bad}")
        return cls(evicted={str(k): str(v) for k, v in (d.get("evicted") or {}).items()},
                   deleted={str(k): str(v) for k, v in (d.get("deleted") or {}).items()},
                   reported=[str(u) for u in d.get("reported") or ()],
                   reported_for=d.get("reported_for", ""),
                   fallback_started=float(started) if started else None)

    @staticmethod
    def problem(d: Mapping[str, Any]) -> str:
        """Why ``d`` holds no usable memory, or ""."""
        try:
            KubeMemo.from_dict(d)
        except BadMemo as e:
            return str(e)
        return ""

    def reported_by(self, notice_id: str) -> frozenset[str]:
        """The PDB-blocked pods already said for ``notice_id``: a notice that took the drain over says
        them again under its own id (the evidence of its own verdict)."""
        return frozenset(self.reported) if self.reported_for in ("", notice_id) else frozenset()
