"""What the drain of one notice is given when it starts: ``DrainSpec``, plain data, fixed.

Its own module so the runner (executor.kube.runner, which re-exports it), the dry-run and
fallback planning (last_resort) and the benches share one definition.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from common.pod_policy import Rules
from common.wire import PhaseEnds
from executor.kube.memo import KubeMemo

WORKERS = 8                # measured: more parallel evictions only collide (research notes)


@dataclass(frozen=True, slots=True)
class DrainSpec:
    """Everything the drain of one notice needs, fixed when it starts (plain data)."""

    notice_id: str
    kind: str
    deadline: float
    deadline_text: str
    received_at: float
    ends: PhaseEnds
    taint_key: str
    cordon_only: bool                     # cordon (and taint) only: move no pod
    pdb_blocked: str                      # delete | report
    exclude_from_lb: bool
    down_after_s: float
    fallback_command: tuple[str, ...] = ()
    steps_done: frozenset[str] = frozenset()
    memo: KubeMemo = field(default_factory=KubeMemo)   # what earlier runs did (the runner works on a copy)
    dry_run: bool = False
    workers: int = WORKERS
    fallback_allowed: bool = False          # the contract lets this notice's kind go around the server
    fallback_at: float = float("inf")       # not before this (common.wire.fallback_at)
    write_spread_s: float = 0.0   # the contract's spread of the hall's eviction starts (after the cordon)
    pod_rules: Rules | None = None   # each pod's own policy (common.pod_policy); None: every pod moves
    source: str = ""                 # who announced the notice: named by the node's NoticeScheduled condition
