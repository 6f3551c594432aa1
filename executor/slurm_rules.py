"""The Slurm drain's decisions, as pure functions over plain data (the clock passed in).

``executor.slurm_drain`` runs the recipe and does the I/O; everything it decides --
the DRAIN reason, the cutoffs and the phase, which jobs to signal, requeue or kill,
what is left, whether a withdrawal may RESUME the node -- is decided here and
tested without a cluster. ``memo`` is the drain's persisted record (``rec["slurm"]``):
job ids are strings there, because they are JSON object keys.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from common.contract import SlurmPolicy
from common.notice import Notice
from common.timefmt import format_rfc3339
from executor.slurm import NodeInfo

REASON_PREFIX = "sco-agent notice "
EVICT_RETRY_S = 5.0   # a job still RUNNING this long after its requeue: the requeue did not land
PHASES = ("checkpoint", "evict", "kill")
_LEVEL_PHASE = {"checkpoint_over": "evict", "evict_over": "kill", "final": "kill"}


def drain_reason(n: Notice) -> str:
    """The DRAIN reason: names the notice, and marks the drain as the agent's own (for RESUME)."""
    return f"{REASON_PREFIX}{n.id} {n.kind} deadline {format_rfc3339(n.deadline)}"


def is_agent_reason(reason: str) -> bool:
    return reason.startswith(REASON_PREFIX)


@dataclass(frozen=True, slots=True)
class Cutoffs:
    checkpoint_by: float  # until then jobs checkpoint; then requeue
    evict_by: float       # then SIGKILL whatever is still on the node


def cutoffs(received_at: float, deadline: float, budget: dict[str, Any]) -> Cutoffs:
    """The contract's phases from receipt, each clamped to the cutoff (deadline - margin).

    The same moments the verifier escalates at and the agent socket's ``checkpoint_by``.
    """
    cut = deadline - budget["margin_s"]
    checkpoint_by = min(received_at + budget["checkpoint_s"], cut)
    evict_by = min(received_at + budget["checkpoint_s"] + budget["evict_s"], cut)
    return Cutoffs(checkpoint_by, max(evict_by, checkpoint_by))


def phase_at(c: Cutoffs, now: float, level: str | None) -> str:
    """checkpoint | evict | kill: by our own clock or the verifier's level, whichever is further."""
    own = "checkpoint" if now < c.checkpoint_by else "evict" if now < c.evict_by else "kill"
    told = _LEVEL_PHASE.get(level or "", "checkpoint")
    return max(own, told, key=PHASES.index)


def new_memo(policy: SlurmPolicy) -> dict[str, Any]:
    """What a drain remembers across restarts. Job ids are strings (JSON object keys)."""
    return {"policy": {"signal": policy.signal, "signal_scope": policy.signal_scope,
                       "on_drain": policy.on_drain},
            "signalled": {}, "evicted": {}, "refused": {},
            "local": {"checkpoint": {}, "term": {}, "kill": {}}, "down_since": None}


def unsignalled(running: Iterable[int], memo: dict[str, Any]) -> list[int]:
    """Running jobs not yet told to checkpoint, through Slurm or directly."""
    told = memo["signalled"].keys() | memo["local"]["checkpoint"].keys()
    return [j for j in running if str(j) not in told]


def to_evict(running: Iterable[int], memo: dict[str, Any], now: float) -> list[int]:
    """Running jobs to requeue (or cancel) now: never tried, or tried long enough ago to retry."""
    tried = memo["evicted"]
    return [j for j in running if str(j) not in memo["refused"]
            and now - tried.get(str(j), float("-inf")) >= EVICT_RETRY_S]


def local_plan(phase: str, jobs: Iterable[int], memo: dict[str, Any]) -> list[tuple[int, str, str, str]]:
    """(job, signal, scope, memo key) to send directly, each at most once per job and phase.

    A job whose requeue Slurm refused is left alone: the contract said requeue, not kill.
    """
    pol = memo["policy"]
    plan = []
    for j in jobs:
        if str(j) in memo["refused"]:
            continue
        if phase == "checkpoint":
            if not unsignalled([j], memo):
                continue
            plan.append((j, pol["signal"], pol["signal_scope"], "checkpoint"))
        elif phase == "evict" and str(j) not in memo["local"]["term"]:
            plan.append((j, "SIGTERM", "full", "term"))
        elif phase == "kill" and str(j) not in memo["local"]["kill"]:
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
