"""What one pod's own wishes, and what it would lose, make of a drain (pure; DESIGN section 9).

``decide(pod, rules)`` answers, for a pod that counts (``common.pod_filters``), one of:

- ``MOVE``: evicted as any other pod (``lost`` names what goes with it on a reclaim);
- ``HOLD``: not sent until ``until`` (epoch; ``inf``: not by this drain), and it still counts
  against "done" -- ``wait-completed``, a reclaim's ``skip``/``wait-completed`` before
  ``release_at``, a pod kubectl would refuse on a rebalance or maintenance;
- ``SKIP``: left in place and not counted against "done" (``skip`` off a reclaim).

The pod's wish is the annotation ``sco.io/drain: evict | skip | wait-completed``; Karpenter's
``karpenter.sh/do-not-disrupt: "true"`` and the cluster autoscaler's
``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`` mean ``skip``. A ``reclaim``
takes the machine whatever the pod wants: its wish holds only until
``deadline - min(terminationGracePeriodSeconds, evict_s)``.

Pods kubectl's drain refuses (kubernetes/kubectl pkg/drain/filters.go: ``localStorageFilter``,
any ``emptyDir`` volume, overridden by ``--delete-emptydir-data``; ``unreplicatedFilter``, no
controller ownerReference, overridden by ``--force``; both let a finished pod go) are evicted on
a reclaim -- the disk goes with the machine -- with ``lost`` saying what; on a rebalance or
maintenance the contract's ``local_pods`` decides, by default as kubectl: kept, and reported.

The verifier reads the same pods and must agree on "empty": ``skipped_by_wish`` is what it
needs (the pods a drain other than a reclaim leaves without counting them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

POLICY_ANNOTATION = "sco.io/drain"
EVICT, SKIP_WISH, WAIT_COMPLETED = "evict", "skip", "wait-completed"
WISHES = (EVICT, SKIP_WISH, WAIT_COMPLETED)
# Other tools' "leave this pod alone", read as skip (Karpenter's docs, "Disruption": pod-level
# controls; the cluster autoscaler's FAQ: "What types of pods can prevent CA from removing a node?").
SKIP_ANNOTATIONS = (("karpenter.sh/do-not-disrupt", "true"),
                    ("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"))
RECLAIM = "reclaim"
DEFAULT_GRACE_S = 30   # the API's default terminationGracePeriodSeconds

MOVE, HOLD, SKIP = "move", "hold", "skip"


@dataclass(frozen=True, slots=True)
class Rules:
    """What a drain decides pods by: the notice's kind and deadline, the contract's evict phase,
    and the contract's ``local_pods`` choices (kubectl's flags, for kinds other than reclaim)."""

    kind: str
    deadline: float
    evict_s: float
    delete_emptydir_data: bool = False
    force: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    action: str                 # MOVE | HOLD | SKIP
    reason: str = ""            # why, as a bounded label: wish:skip, wish:wait-completed, local_storage, unreplicated
    until: float = 0.0          # HOLD: not sent before this (epoch); inf: not by this drain
    lost: tuple[str, ...] = ()  # MOVE on a reclaim: what goes with the pod


def wish_of(pod: dict[str, Any]) -> str:
    """The pod's own wish: EVICT, SKIP_WISH or WAIT_COMPLETED (an unknown value: EVICT)."""
    notes = (pod.get("metadata") or {}).get("annotations") or {}
    if not isinstance(notes, dict):
        return EVICT
    value = notes.get(POLICY_ANNOTATION)
    if value in WISHES:
        return str(value)
    if any(str(notes.get(key, "")).lower() == want for key, want in SKIP_ANNOTATIONS):
        return SKIP_WISH
    return EVICT


def grace_of(pod: dict[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return DEFAULT_GRACE_S


def release_at(pod: dict[str, Any], rules: Rules) -> float:
    """On a reclaim, when a pod's wish stops holding it: its own grace period before the deadline
    (so it can still stop cleanly), capped by the contract's ``evict_s``."""
    return rules.deadline - min(grace_of(pod), rules.evict_s)


def empty_dirs(pod: dict[str, Any]) -> tuple[str, ...]:
    """The names of the pod's emptyDir volumes (kubectl's hasLocalStorage: any emptyDir)."""
    volumes = (pod.get("spec") or {}).get("volumes") or ()
    return tuple(str(v.get("name", "")) for v in volumes if isinstance(v, dict) and v.get("emptyDir") is not None)


def has_controller(pod: dict[str, Any]) -> bool:
    """An ownerReference with ``controller: true`` (metav1.GetControllerOf)."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return any(isinstance(r, dict) and r.get("controller") is True for r in refs)


def lost_with(pod: dict[str, Any]) -> tuple[str, ...]:
    """What evicting the pod loses for good: its emptyDir data, and the pod itself when no
    controller recreates it."""
    out = [f"emptyDir:{name}" for name in empty_dirs(pod)]
    if not has_controller(pod):
        out.append("unreplicated: no controller recreates it")
    return tuple(out)


def decide(pod: dict[str, Any], rules: Rules) -> Decision:
    """What the drain does with a pod that counts (``common.pod_filters``)."""
    wish = wish_of(pod)
    if rules.kind == RECLAIM:
        lost = lost_with(pod)
        if wish != EVICT:
            return Decision(HOLD, f"wish:{wish}", release_at(pod, rules), lost)
        return Decision(MOVE, lost=lost)
    if wish == SKIP_WISH:
        return Decision(SKIP, "wish:skip")
    if wish == WAIT_COMPLETED:
        return Decision(HOLD, "wish:wait-completed", float("inf"))
    if empty_dirs(pod) and not rules.delete_emptydir_data:
        return Decision(HOLD, "local_storage", float("inf"))
    if not has_controller(pod) and not rules.force:
        return Decision(HOLD, "unreplicated", float("inf"))
    return Decision(MOVE)


def skip_honoured(kind: str) -> bool:
    """Does a drain of this kind leave ``skip`` pods in place, uncounted? (Every kind but reclaim.)"""
    return kind != RECLAIM


def skipped_by_wish(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods that wish to be skipped: a drain of a kind that honours it leaves them, uncounted."""
    return [p for p in pods if wish_of(p) == SKIP_WISH]
