"""Builders for the manifests tests seed: nodes, pods, PDBs, DaemonSets, namespaces.

Plain dicts in the real API's shape, with only the fields a drain looks at. Seed them through
``/_emu/seed`` (status kept) or create them through the API (status reset by the server).
"""
from __future__ import annotations

import uuid
from typing import Any

from .controllers import HOLD_PHASE, TERMINATE_AFTER, VOLUME_DETACH
from .policy import FROZEN_ANNOTATION

_OWNER_API = {"ReplicaSet": "apps/v1", "DaemonSet": "apps/v1", "StatefulSet": "apps/v1",
              "Deployment": "apps/v1", "Job": "batch/v1", "ReplicationController": "v1"}
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def owner_ref(kind: str, name: str, uid: str | None = None, controller: bool = True) -> dict[str, Any]:
    """A controller ownerReference; the uid is derived from kind/name unless given."""
    return {"apiVersion": _OWNER_API.get(kind, "v1"), "kind": kind, "name": name,
            "uid": uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"emulator/{kind}/{name}")),
            "controller": controller, "blockOwnerDeletion": True}


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def node(name: str, *, labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
         unschedulable: bool = False, ready: bool = True, internal_ip: str = "10.0.0.10") -> dict[str, Any]:
    """A registered node; ``ready=False`` also means its kubelet is dead in the emulator."""
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              **(labels or {})}},
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "KubeletReady" if ready else "KubeletNotReady",
                            "message": "kubelet is posting ready status" if ready else "kubelet stopped"}],
            "addresses": [{"type": "InternalIP", "address": internal_ip}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.37.0", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "emulator://1",
                         "kernelVersion": "6.1.0", "osImage": "Emulated Linux", "machineID": "",
                         "systemUUID": "", "bootID": ""},
        },
    }


def pod(name: str, node_name: str | None = None, *, namespace: str = "default",
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        owner: dict[str, Any] | None = None, phase: str | None = "Running", grace: int | None = None,
        empty_dir: bool = False, mirror: bool = False, terminate_after: float | str | None = None,
        hold_phase: bool = False, tolerations: list[dict[str, Any]] | None = None,
        claims: tuple[str, ...] = (), volume_detach: str | None = None) -> dict[str, Any]:
    """A pod, bound to ``node_name`` when given; ``claims``: PersistentVolumeClaims it mounts
    (attached to its node: controllers.py), ``volume_detach="never"``: they never detach.

    ``phase="Running"`` seeds it running and Ready; ``phase=None`` leaves it Pending for the
    simulated kubelet to start. ``terminate_after`` (seconds or "never") and ``hold_phase``
    set the emulator's per-pod knobs.
    """
    notes = dict(annotations or {})
    if mirror:
        notes[MIRROR_ANNOTATION] = "emulated-mirror-hash"
    if terminate_after is not None:
        notes[TERMINATE_AFTER] = str(terminate_after)
    if hold_phase:
        notes[HOLD_PHASE] = "true"
    if volume_detach is not None:
        notes[VOLUME_DETACH] = volume_detach
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if notes:
        meta["annotations"] = notes
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.example/app:1"}]}
    if node_name:
        spec["nodeName"] = node_name
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    if tolerations:
        spec["tolerations"] = tolerations
    for claim in claims:
        spec.setdefault("volumes", []).append({"name": claim, "persistentVolumeClaim": {"claimName": claim}})
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if phase == "Running":
        out["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                         "containerStatuses": [{"name": "main", "ready": True, "started": True,
                                                "restartCount": 0, "image": "registry.example/app:1",
                                                "imageID": "", "state": {"running": {}}}]}
    elif phase is not None:
        out["status"] = {"phase": phase}
    return out


def daemonset(name: str, namespace: str = "kube-system", labels: dict[str, str] | None = None) -> dict[str, Any]:
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "main", "image": "registry.example/ds:1"}]}}}}


def pdb(name: str, match_labels: dict[str, str], *, namespace: str = "default",
        min_available: int | str | None = None, max_unavailable: int | str | None = None,
        api_version: str = "policy/v1", frozen_status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A PodDisruptionBudget; ``frozen_status`` pins its status (the controller leaves it alone)."""
    spec: dict[str, Any] = {"selector": {"matchLabels": dict(match_labels)}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    out: dict[str, Any] = {"apiVersion": api_version, "kind": "PodDisruptionBudget",
                           "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    if frozen_status is not None:
        out["metadata"]["annotations"] = {FROZEN_ANNOTATION: "true"}
        out["status"] = {"observedGeneration": 1, **frozen_status}
    return out
