"""Plain pod and PDB dicts for the pure-core tests (the shape the API returns, only what matters)."""
from __future__ import annotations

from typing import Any


def pod(name: str, *, ns: str = "default", node: str = "node-a", labels: dict[str, str] | None = None,
        owner: tuple[str, str] | None = None, priority: int | None = None, priority_class: str | None = None,
        grace: int | None = None, phase: str = "Running", terminating: bool = False, mirror: bool = False,
        uid: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid or f"uid-{ns}-{name}", "labels": labels or {}}
    if owner:
        md["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "uid": f"owner-{owner[1]}", "controller": True}]
    if terminating:
        md["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    if mirror:
        md["annotations"] = {"kubernetes.io/config.mirror": "hash"}
    spec: dict[str, Any] = {"nodeName": node}
    if priority is not None:
        spec["priority"] = priority
    if priority_class:
        spec["priorityClassName"] = priority_class
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": md, "spec": spec, "status": {"phase": phase}}


def pdb(name: str, match_labels: dict[str, str], ns: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"selector": {"matchLabels": match_labels}}}
