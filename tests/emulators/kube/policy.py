"""PodDisruptionBudgets: the disruption controller's status and the eviction decision.

Pure functions over plain dicts with the time passed in. The eviction rules copy
pkg/registry/core/pod/storage/eviction.go; the status rules copy the disruption controller,
except that the expected pod count is the number of matching pods (the emulator keeps no
ReplicaSet/StatefulSet scale to read).

What a client watching PDB status relies on (executor/kube/budget_gate.py), as upstream:
``checkAndDecrement`` decrements disruptionsAllowed and records the pod in disruptedPods in one
status write, before the pod's delete; pkg/controller/disruption (``buildDisruptedPodMap``,
``countHealthyPods``) drops a terminating pod from disruptedPods (or one past DeletionTimeout, 2
min) and counts neither as healthy; the status is written only when it changes (here: the
store skips a no-op write, so a watch sees no event). The "still being processed" 429 carries
Retry-After 10 as newer servers send; 1.20.2 sends none (its ``NewTooManyRequests(..., 0)``).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from common.timefmt import format_rfc3339, parse_rfc3339

from .errors import ApiError, forbidden, status_body, too_many_requests
from .selectors import label_selector_requirements, labels_match, selector_is_empty
from .strategy import is_pod_ready

# A PDB carrying this annotation ("true") keeps whatever status it has: the controller skips it.
FROZEN_ANNOTATION = "emulator.sco/frozen-status"
DISRUPTED_POD_TIMEOUT = 120.0  # seconds an eviction stays in status.disruptedPods (upstream: 2 min)
MAX_DISRUPTED_PODS = 2000
_IGNORE_PDB_PHASES = ("Succeeded", "Failed", "Pending")


def pdb_matches(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    """Same namespace and a non-empty selector that matches (an empty one matches nothing)."""
    if pdb["metadata"].get("namespace") != pod["metadata"].get("namespace"):
        return False
    selector = (pdb.get("spec") or {}).get("selector")
    if selector_is_empty(selector):
        return False
    try:
        reqs = label_selector_requirements(selector)
    except ValueError:
        return False  # an invalid selector matches nothing, as upstream
    return labels_match(pod["metadata"].get("labels"), reqs)


def scaled(value: Any, total: int) -> int:
    """IntOrString as ``GetScaledValueFromIntOrPercent(..., roundUp=true)``."""
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%"):
            return math.ceil(int(text[:-1]) * total / 100)
        return int(text)
    return int(value)


def _terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def is_frozen(pdb: dict[str, Any]) -> bool:
    return (pdb["metadata"].get("annotations") or {}).get(FROZEN_ANNOTATION) == "true"


def compute_status(pdb: dict[str, Any], pods: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """The status the disruption controller writes for ``pdb`` given the namespace's pods."""
    spec = pdb.get("spec") or {}
    old = pdb.get("status") or {}
    matching = [p for p in pods if pdb_matches(pdb, p)]
    expected = len(matching)
    old_disrupted = old.get("disruptedPods") or {}
    disrupted = {}
    for pod in matching:
        name = pod["metadata"]["name"]
        stamp = old_disrupted.get(name)
        if stamp and not _terminating(pod):
            try:
                if parse_rfc3339(stamp) + DISRUPTED_POD_TIMEOUT > now:
                    disrupted[name] = stamp
            except ValueError:
                pass
    healthy = sum(1 for p in matching if not _terminating(p) and p["metadata"]["name"] not in disrupted
                  and (p.get("status") or {}).get("phase") == "Running" and is_pod_ready(p))
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = scaled(spec["minAvailable"], expected)
    else:
        desired = 0
    allowed = max(0, healthy - desired) if expected > 0 else 0
    status: dict[str, Any] = {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }
    if disrupted:
        status["disruptedPods"] = disrupted
    status["conditions"] = [_allowed_condition(old, allowed > 0, status["observedGeneration"], now)]
    return status


def _allowed_condition(old_status: dict[str, Any], allowed: bool, generation: int, now: float) -> dict[str, Any]:
    state = "True" if allowed else "False"
    previous = next((c for c in old_status.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None)
    since = previous["lastTransitionTime"] if previous and previous.get("status") == state else format_rfc3339(
        now, millis=False)
    return {"type": "DisruptionAllowed", "status": state,
            "reason": "SufficientPods" if allowed else "InsufficientPods", "message": "",
            "observedGeneration": generation, "lastTransitionTime": since}


@dataclass(frozen=True)
class EvictionPlan:
    """What an allowed eviction writes: the PDB whose status changes (if any), then the delete."""

    pdb_name: str | None = None
    pdb_status: dict[str, Any] | None = None


def can_ignore_pdb(pod: dict[str, Any]) -> bool:
    """Terminal, Pending or already-terminating pods are deleted without consulting PDBs."""
    return (pod.get("status") or {}).get("phase") in _IGNORE_PDB_PHASES or _terminating(pod)


def plan_eviction(pod: dict[str, Any], pdbs: list[dict[str, Any]], now: float) -> EvictionPlan:
    """Decide an eviction; raise the ApiError (429/500/403) the real server would answer."""
    if can_ignore_pdb(pod):
        return EvictionPlan()
    matching = [p for p in pdbs if pdb_matches(p, pod)]
    if len(matching) > 1:
        raise ApiError(status_body(500, "This pod has more than one PodDisruptionBudget, which the "
                                        "eviction subresource does not support.", reason=""))
    if not matching:
        return EvictionPlan()
    pdb = matching[0]
    name = pdb["metadata"]["name"]
    status = pdb.get("status") or {}
    if not is_pod_ready(pod):
        if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return EvictionPlan()
        if status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) > 0:
            return EvictionPlan()
    if status.get("observedGeneration", 0) < pdb["metadata"].get("generation", 1):
        raise too_many_requests(
            "Cannot evict pod as it would violate the pod's disruption budget.",
            [{"reason": "DisruptionBudget",
              "message": f"The disruption budget {name} is still being processed by the server."}],
            retry_after=10)
    allowed = status.get("disruptionsAllowed", 0)
    if allowed < 0:
        raise forbidden("poddisruptionbudgets", "policy", name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        raise forbidden("poddisruptionbudgets", "policy", name,
                        "DisruptedPods map too big - too many evictions not confirmed by PDB controller")
    if allowed == 0:
        raise too_many_requests(
            "Cannot evict pod as it would violate the pod's disruption budget.",
            [{"reason": "DisruptionBudget",
              "message": f"The disruption budget {name} needs {status.get('desiredHealthy', 0)} healthy pods "
                         f"and has {status.get('currentHealthy', 0)} currently"}])
    new_status = copy.deepcopy(status)
    new_status["disruptionsAllowed"] = allowed - 1
    new_status.setdefault("disruptedPods", {})[pod["metadata"]["name"]] = format_rfc3339(now, millis=False)
    if allowed - 1 == 0:
        others = [c for c in new_status.get("conditions") or [] if c.get("type") != "DisruptionAllowed"]
        new_status["conditions"] = others + [_allowed_condition(status, False, status.get(
            "observedGeneration", 0), now)]
    return EvictionPlan(name, new_status)


def disruption_target_condition(now: float) -> dict[str, Any]:
    """The pod condition the eviction API adds before deleting (k8s >= 1.26)."""
    return {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting", "lastTransitionTime": format_rfc3339(now, millis=False)}
