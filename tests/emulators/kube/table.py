"""Server-side printing: the ``meta.k8s.io/v1`` Table kubectl asks for on ``kubectl get``.

Columns copy the real printers (pkg/printers/internalversion) for the served kinds, so
``kubectl get nodes`` shows ``Ready,SchedulingDisabled`` after a cordon as on a real cluster.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.timefmt import parse_rfc3339

from .resources import ResourceType, api_version_of

# name, type, cell; a name ending in "+" is a wide (-o wide, priority 1) column.
Column = tuple[str, str, Callable[[dict[str, Any], float], Any]]


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years, days = hours // 24 // 365, (hours // 24) % 365
    return f"{years}y{days}d" if days and hours < 24 * 365 * 8 else f"{years}y"


def _age(obj: dict[str, Any], now: float) -> str:
    try:
        return human_duration(now - parse_rfc3339(obj["metadata"].get("creationTimestamp", "")))
    except ValueError:
        return "<unknown>"


def _node_status(node: dict[str, Any], _now: float) -> str:
    ready = next((c.get("status") for c in (node.get("status") or {}).get("conditions") or []
                  if c.get("type") == "Ready"), None)
    states = ["Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"]
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    return ",".join(states)


def _node_roles(node: dict[str, Any], _now: float) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix):] for k in node["metadata"].get("labels") or {} if k.startswith(prefix))
    return ",".join(r for r in roles if r) or "<none>"


def _pod_ready(pod: dict[str, Any], _now: float) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _pod_status(pod: dict[str, Any], _now: float) -> str:
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return status.get("reason") or status.get("phase") or "Unknown"


def _get(path: str, default: Any = "") -> Callable[[dict[str, Any], float], Any]:
    def cell(obj: dict[str, Any], _now: float) -> Any:
        cur: Any = obj
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        return default if cur is None else cur

    return cell


def _address(kind: str) -> Callable[[dict[str, Any], float], Any]:
    def cell(node: dict[str, Any], _now: float) -> str:
        addresses = (node.get("status") or {}).get("addresses") or []
        return next((a.get("address", "") for a in addresses if a.get("type") == kind), "<none>")

    return cell


_NAME: Column = ("Name", "string", lambda o, _n: o["metadata"]["name"])
_AGE: Column = ("Age", "string", _age)
COLUMNS: dict[str, list[Column]] = {
    "Node": [_NAME, ("Status", "string", _node_status), ("Roles", "string", _node_roles), _AGE,
             ("Version", "string", _get("status.nodeInfo.kubeletVersion")),
             ("Internal-IP+", "string", _address("InternalIP")), ("External-IP+", "string", _address("ExternalIP")),
             ("OS-Image+", "string", _get("status.nodeInfo.osImage", "<unknown>")),
             ("Kernel-Version+", "string", _get("status.nodeInfo.kernelVersion", "<unknown>")),
             ("Container-Runtime+", "string", _get("status.nodeInfo.containerRuntimeVersion", "<unknown>"))],
    "Pod": [_NAME, ("Ready", "string", _pod_ready), ("Status", "string", _pod_status),
            ("Restarts", "string", lambda o, _n: "0"), _AGE, ("IP+", "string", _get("status.podIP", "<none>")),
            ("Node+", "string", _get("spec.nodeName", "<none>")),
            ("Nominated Node+", "string", _get("status.nominatedNodeName", "<none>")),
            ("Readiness Gates+", "string", lambda o, _n: "<none>")],
    "PodDisruptionBudget": [_NAME, ("Min Available", "string", _get("spec.minAvailable", "N/A")),
                            ("Max Unavailable", "string", _get("spec.maxUnavailable", "N/A")),
                            ("Allowed Disruptions", "integer", _get("status.disruptionsAllowed", 0)), _AGE],
    "DaemonSet": [_NAME, ("Desired", "integer", _get("status.desiredNumberScheduled", 0)),
                  ("Current", "integer", _get("status.currentNumberScheduled", 0)),
                  ("Ready", "integer", _get("status.numberReady", 0)), _AGE],
    "Namespace": [_NAME, ("Status", "string", _get("status.phase")), _AGE],
}


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def to_table(rt: ResourceType, version: str, objects: list[dict[str, Any]], list_meta: dict[str, Any],
             now: float, include_object: str = "Metadata") -> dict[str, Any]:
    """A Table of ``objects``; each row carries the object's metadata (or the object)."""
    columns = COLUMNS.get(rt.kind, [_NAME, _AGE])
    rows = []
    for obj in objects:
        if include_object == "Object":
            embedded: Any = {"kind": rt.kind, "apiVersion": api_version_of(rt, version), **obj}
        elif include_object == "None":
            embedded = None
        else:
            embedded = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj["metadata"]}
        rows.append({"cells": [cell(obj, now) for _, _, cell in columns], "object": embedded})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
            "columnDefinitions": [{"name": name.rstrip("+"), "type": kind,
                                   "format": "name" if name == "Name" else "", "description": "",
                                   "priority": 1 if name.endswith("+") else 0} for name, kind, _ in columns],
            "rows": rows}
