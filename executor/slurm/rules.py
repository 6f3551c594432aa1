"""The Slurm drain's decisions, as pure functions over plain data (the clock passed in).

``executor.slurm.recipe`` runs the recipe and does the I/O; everything it decides --
the DRAIN reason, the phase (from ``common.wire.phase_ends``, the verifier's clock
too), which jobs to signal, requeue or kill, what is left, whether a withdrawal may
RESUME the node -- is decided here and tested without a cluster. ``memo`` is the
drain's persisted memory (``executor.slurm.memo.SlurmMemo``, the record's ``slurm`` key).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from common.contract import SlurmPolicy
from common.timefmt import format_rfc3339
from common.wire import CHECKPOINT_OVER, EVICT_OVER, FINAL, Phase, PhaseEnds
from executor.slurm.cli import NodeInfo
from executor.slurm.memo import SlurmMemo

REASON_PREFIX = "sco-agent notice "
EVICT_RETRY_S = 5.0   # a job still RUNNING this long after its requeue: the requeue did not land
PHASES = ("checkpoint", "evict", "kill")
_LEVEL_PHASE = {CHECKPOINT_OVER: "evict", EVICT_OVER: "kill", FINAL: "kill"}


def drain_reason(notice_id: str, kind: str, deadline: float) -> str:
    """The DRAIN reason: names the notice, and marks the drain as the agent's own (for RESUME)."""
    return f"{REASON_PREFIX}{notice_id} {kind} deadline {format_rfc3339(deadline)}"


def is_agent_reason(reason: str) -> bool:
    return reason.startswith(REASON_PREFIX)


def drain_wanted(node: NodeInfo, notice_id: str) -> bool:
    """DRAIN (again) for the drain of ``notice_id``: the node is not drained, or the agent's own DRAIN
    names another notice -- one that took the drain over renames it. An operator's drain is left."""
    if not node.drain_set:
        return True
    return is_agent_reason(node.reason) and not node.reason.startswith(f"{REASON_PREFIX}{notice_id} ")


def phase_at(ends: PhaseEnds, now: float, level: str | None) -> str:
    """checkpoint | evict | kill: by our own clock or the verifier's level, whichever is further."""
    own = "checkpoint" if now < ends.checkpoint_by else "evict" if now < ends.evict_at else "kill"
    told = _LEVEL_PHASE.get(level or "", "checkpoint")
    return max(own, told, key=PHASES.index)


def new_memo(policy: SlurmPolicy) -> SlurmMemo:
    """What a drain remembers across restarts (executor.slurm.memo), empty."""
    return SlurmMemo(policy)


def unsignalled(running: Iterable[int], memo: SlurmMemo) -> list[int]:
    """Running jobs not yet told to checkpoint, through Slurm or directly."""
    told = memo.signalled.keys() | memo.local["checkpoint"].keys()
    return [j for j in running if str(j) not in told]


def to_evict(running: Iterable[int], memo: SlurmMemo, now: float) -> list[int]:
    """Running jobs to requeue (or cancel) now: never tried, or tried long enough ago to retry."""
    tried = memo.evicted
    return [j for j in running if str(j) not in memo.refused
            and now - tried.get(str(j), float("-inf")) >= EVICT_RETRY_S]


def local_plan(phase: str, jobs: Iterable[int], memo: SlurmMemo) -> list[tuple[int, str, str, str]]:
    """(job, signal, scope, memo key) to send directly, each at most once per job and phase.

    A job whose requeue Slurm refused is left alone: the contract said requeue, not kill.
    """
    pol = memo.policy
    plan = []
    for j in jobs:
        if str(j) in memo.refused:
            continue
        if phase == "checkpoint":
            if not unsignalled([j], memo):
                continue
            plan.append((j, pol.signal, pol.signal_scope, "checkpoint"))
        elif phase == "evict" and str(j) not in memo.local["term"]:
            plan.append((j, "SIGTERM", "full", "term"))
        elif phase == "kill" and str(j) not in memo.local["kill"]:
            plan.append((j, "SIGKILL", "full", "kill"))
    return plan


def remaining(active: list[int], node_state: str) -> list[str]:
    """What keeps the node from done: its jobs, else a state other than drained; [] means done."""
    if active:
        return [str(j) for j in active]
    return [] if node_state == "drained" else [f"node:{node_state or 'unknown'}"]


def undo_action(node: NodeInfo, other_notices: bool) -> str:
    """On a withdrawn notice: RESUME only the agent's own drain, and only if no other notice needs it.

    ``wait`` while the node is UNKNOWN (a restarted slurmctld has not heard slurmd yet): Slurm then
    answers a RESUME with "Invalid node state specified" yet clears the DRAIN all the same, so the
    agent would record an error and, a round later, "not_drained" for a drain it did undo.
    """
    if "UNKNOWN" in node.flags:
        return "wait"
    if not node.drain_set:
        return "not_drained"
    if not is_agent_reason(node.reason):
        return "kept_operator_drain"
    if other_notices:
        return "kept_for_other_notice"
    return "resume"


def dry_run_jobs(running: list[int], policy: SlurmPolicy, ends: PhaseEnds) -> list[dict[str, Any]]:
    """What a dry run says the drain would do to each running job, phase by phase, and when."""
    move = "cancel" if policy.on_drain == "cancel" else "requeue"
    return [{"job": j, "steps": [
        {"phase": Phase.CHECKPOINT, "action": f"scancel --signal={policy.signal} --{policy.signal_scope}",
         "until": ends.checkpoint_by},
        {"phase": Phase.REQUEUE, "action": move, "at": ends.checkpoint_by},
        {"phase": Phase.KILL, "action": "SIGKILL if still here", "at": ends.evict_at}]} for j in running]
