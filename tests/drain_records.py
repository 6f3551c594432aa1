"""Drain records for tests: the executor's record of a drain (common.wire.DrainRecord), as it sends it."""
from __future__ import annotations

from typing import Any

from common.contract import BUILTIN
from common.notice import Notice
from common.wire import Ack, Budget, DrainRecord

BUDGET = Budget.of(BUILTIN.drain)


def budget(checkpoint_s: float, evict_s: float, margin_s: float, budget_s: float | None = None) -> Budget:
    return Budget(checkpoint_s + evict_s + margin_s if budget_s is None else budget_s, checkpoint_s, evict_s,
                  margin_s)


def record(n: Notice | None = None, *, budget: Budget = BUDGET, steps: dict[str, float] | None = None,
           acks: dict[str, tuple[str, float]] | None = None, **fields: Any) -> DrainRecord:
    """A running drain of ``n`` (its kind and receipt) on ``budget``; ``fields`` override the rest."""
    base: dict[str, Any] = {"kind": n.kind if n else "reclaim", "received_at": n.received_at if n else 0.0,
                            "policy": "drain", "taint_key": BUILTIN.taint_key}
    base.update(fields)
    return DrainRecord(budget=budget, steps=dict(steps or {}),
                       acks={k: Ack(s, t) for k, (s, t) in (acks or {}).items()}, **base)


def record_dict(n: Notice | None = None, **kw: Any) -> dict[str, Any]:
    """``record(...)`` as it is on the wire and in executor.json."""
    return record(n, **kw).to_dict()
