"""The Slurm drain's memory across restarts: ``SlurmMemo``, one typed record and its codec.

It travels in the drain record's ``slurm`` key (``common.wire.DrainRecord.memo``) in the
shape earlier agents wrote, so their records read as they are; it is read and written
here only. Job ids are strings in it (they are JSON object keys).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.contract import SlurmPolicy

LOCAL_KEYS = ("checkpoint", "term", "kill")   # the signals sent directly, each at most once per job


class BadMemo(ValueError):
    """The record's Slurm memory has the wrong shape."""


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _times(d: object, what: str) -> dict[str, float]:
    if not isinstance(d, dict) or not all(_number(v) for v in d.values()):
        raise BadMemo(f"slurm memo: {what} is not an object of times")
    return {str(k): float(v) for k, v in d.items()}


@dataclass(slots=True)
class SlurmMemo:
    policy: SlurmPolicy                     # the contract's, frozen when the drain started
    signalled: dict[str, float] = field(default_factory=dict)   # job -> told to checkpoint (scancel)
    evicted: dict[str, float] = field(default_factory=dict)     # job -> last requeue (or cancel) sent
    refused: dict[str, str] = field(default_factory=dict)       # job -> why Slurm refused its requeue
    local: dict[str, dict[str, float]] = field(default_factory=lambda: {k: {} for k in LOCAL_KEYS})
    down_since: float | None = None         # slurmctld stopped answering then (epoch); None: it answers

    def to_dict(self) -> dict[str, Any]:
        p = self.policy
        return {"policy": {"signal": p.signal, "signal_scope": p.signal_scope, "on_drain": p.on_drain},
                "signalled": dict(self.signalled), "evicted": dict(self.evicted), "refused": dict(self.refused),
                "local": {k: dict(v) for k, v in self.local.items()}, "down_since": self.down_since}

    @classmethod
    def from_dict(cls, d: object) -> SlurmMemo:
        """The memory in a record's ``slurm`` key; BadMemo if malformed."""
        if not isinstance(d, dict):
            raise BadMemo("slurm memo is not an object")
        policy, local, refused = d.get("policy"), d.get("local"), d.get("refused")
        if not (isinstance(policy, dict)
                and all(isinstance(policy.get(k), str) for k in ("signal", "signal_scope", "on_drain"))):
            raise BadMemo("slurm memo: policy")
        if not (isinstance(local, dict) and all(isinstance(local.get(k), dict) for k in LOCAL_KEYS)):
            raise BadMemo("slurm memo: local")
        if not isinstance(refused, dict) or not isinstance(d.get("signalled"), dict):
            raise BadMemo("slurm memo: refused or signalled")
        down = d.get("down_since")
        if down is not None and not _number(down):
            raise BadMemo("slurm memo: down_since")
        # Times written by every agent so far are numbers; signalled ones were never checked: kept as read.
        signalled = {str(k): v for k, v in d["signalled"].items()}
        return cls(SlurmPolicy(policy["signal"], policy["signal_scope"], policy["on_drain"]),
                   signalled=signalled, evicted=_times(d.get("evicted"), "evicted"),
                   refused={str(k): str(v) for k, v in refused.items()},
                   local={k: {str(j): v for j, v in local[k].items()} for k in LOCAL_KEYS},
                   down_since=None if down is None else float(down))


def of_record(memo: Mapping[str, Any]) -> SlurmMemo | None:
    """The Slurm memory of a record's memo (its ``slurm`` key); None before the drain's first round."""
    slurm = memo.get("slurm")
    return SlurmMemo.from_dict(slurm) if slurm is not None else None


def memo_problem(memo: dict[str, Any]) -> str:
    """Why a drain record's Slurm memory cannot be used, or ""."""
    try:
        of_record(memo)
    except BadMemo:
        return "slurm memo is malformed"
    return ""
