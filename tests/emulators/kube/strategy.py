"""Per-kind create defaults, validation and deletion rules (the "strategies" of the real server).

Pure functions over plain dicts; ``ApiError`` for anything the real server would refuse.
Only the rules a drain touches are copied: name formats, pod containers, the PDB
minAvailable/maxUnavailable exclusion, pod status reset, graceful deletion periods.
"""
from __future__ import annotations

import re
from typing import Any

from .errors import ApiError, invalid
from .resources import NAMESPACES, PDBS, PODS, ResourceType

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DEFAULT_GRACE_SECONDS = 30
TERMINAL_PHASES = ("Succeeded", "Failed")


def _cause(field: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def name_causes(rt: ResourceType, name: str) -> list[dict[str, str]]:
    """Upstream's name rules: RFC 1123 subdomain (namespaces: label)."""
    if rt is NAMESPACES:
        if len(name) > 63 or not _LABEL.match(name):
            return [_cause("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 label must '
                           "consist of lower case alphanumeric characters or '-', and must start and end "
                           "with an alphanumeric character")]
        return []
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        return [_cause("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
                       "consist of lower case alphanumeric characters, '-' or '.', and must start and end "
                       "with an alphanumeric character")]
    return []


def _pod_causes(pod: dict[str, Any]) -> list[dict[str, str]]:
    containers = (pod.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        return [_cause("spec.containers", "Required value", "FieldValueRequired")]
    causes = []
    for i, c in enumerate(containers):
        for key in ("name", "image"):
            if not isinstance(c, dict) or not c.get(key):
                causes.append(_cause(f"spec.containers[{i}].{key}", "Required value", "FieldValueRequired"))
    return causes


def _pdb_causes(pdb: dict[str, Any]) -> list[dict[str, str]]:
    spec = pdb.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        return [_cause("spec", "Invalid value: minAvailable and maxUnavailable cannot be both set")]
    return []


def validate(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Raise 422 Invalid for what the real server would reject at create/update."""
    name = obj["metadata"].get("name", "")
    causes = name_causes(rt, name) if name else [
        _cause("metadata.name", "Required value: name or generateName is required", "FieldValueRequired")]
    if rt is PODS:
        causes += _pod_causes(obj)
    elif rt is PDBS:
        causes += _pdb_causes(obj)
    if causes:
        raise invalid(rt.kind, rt.group, name, causes)


def prepare_create(rt: ResourceType, obj: dict[str, Any], seeding: bool) -> None:
    """Defaults and status reset applied by the server at create (in place).

    Seeded objects keep the status they bring, so a test can start from any state.
    """
    spec = obj.setdefault("spec", {"finalizers": ["kubernetes"]} if rt is NAMESPACES else {})
    if rt is PODS:
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("priority", 0)
        if not seeding or not obj.get("status"):
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif rt is NAMESPACES:
        obj["status"] = {"phase": "Active"}
    elif rt is PDBS and (not seeding or not obj.get("status")):
        obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    elif rt.kind == "DaemonSet" and (not seeding or not obj.get("status")):
        obj["status"] = {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                         "desiredNumberScheduled": 0, "numberReady": 0}


def deletion_grace(rt: ResourceType, obj: dict[str, Any], options: dict[str, Any]) -> int:
    """Seconds of graceful deletion; 0 means remove now (CheckGracefulDelete of the pod strategy)."""
    if rt is not PODS:
        return 0
    requested = options.get("gracePeriodSeconds")
    spec = obj.get("spec") or {}
    grace = int(requested) if requested is not None else int(
        spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))
    # Unscheduled or finished pods have no kubelet to wait for.
    if not spec.get("nodeName") or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return 0
    return 1 if grace < 0 else grace


def check_preconditions(obj: dict[str, Any], options: dict[str, Any], err: ApiError) -> None:
    """DeleteOptions.preconditions: a UID or resourceVersion that does not match is a 409."""
    pre = options.get("preconditions") or {}
    meta = obj["metadata"]
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        err.status["message"] = (f"Precondition failed: UID in precondition: {pre['uid']}, "
                                 f"UID in object meta: {meta.get('uid')}")
        raise err
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
        err.status["message"] = (f"Precondition failed: ResourceVersion in precondition: "
                                 f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                 f"{meta.get('resourceVersion')}")
        raise err


def is_pod_ready(pod: dict[str, Any]) -> bool:
    """Ready condition True; a Running pod with no Ready condition counts as ready.

    The leniency lets tests seed a bare ``phase: Running`` pod and have it count as healthy.
    """
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return status.get("phase") == "Running"
