"""The resource types the emulator serves and the discovery documents that advertise them.

One table (``RESOURCES``) drives routing, storage, field-selector checks and discovery, so a
resource is described once. Discovery is the legacy (non-aggregated) form: kubectl v1.37 asks for
the aggregated ``apidiscovery.k8s.io/v2`` form first and falls back when the answer is plain
``application/json`` (see the research notes).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")


@dataclass(frozen=True)
class ResourceType:
    """How one resource is addressed, stored and described."""

    name: str  # plural, as in URLs
    kind: str
    group: str  # "" for the core group
    namespaced: bool
    short_names: tuple[str, ...] = ()
    has_status: bool = True  # a /status subresource; main writes keep the old status
    tracks_generation: bool = False  # metadata.generation bumps when spec changes
    field_labels: frozenset[str] = field(default_factory=frozenset)
    categories: tuple[str, ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()


_META = frozenset({"metadata.name", "metadata.namespace"})

NAMESPACES = ResourceType("namespaces", "Namespace", "", False, ("ns",),
                          field_labels=frozenset({"metadata.name", "status.phase"}))
NODES = ResourceType("nodes", "Node", "", False, ("no",),
                     field_labels=frozenset({"metadata.name", "spec.unschedulable"}))
# The pod field labels are the real server's full list (pkg/registry/core/pod/strategy.go).
PODS = ResourceType(
    "pods", "Pod", "", True, ("po",),
    field_labels=_META | {
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
    },
    categories=("all",),
)
PDBS = ResourceType("poddisruptionbudgets", "PodDisruptionBudget", "policy", True, ("pdb",),
                    tracks_generation=True, field_labels=_META)
DAEMONSETS = ResourceType("daemonsets", "DaemonSet", "apps", True, ("ds",),
                          tracks_generation=True, field_labels=_META, categories=("all",))

RESOURCES: tuple[ResourceType, ...] = (NAMESPACES, NODES, PODS, PDBS, DAEMONSETS)
BY_KIND = {rt.kind: rt for rt in RESOURCES}

# Namespaces that exist on every fresh cluster.
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def group_versions(group: str, policy_versions: tuple[str, ...]) -> tuple[str, ...]:
    """Served versions of a group, preferred first; policy is configurable (1.20 had only v1beta1)."""
    if group == "policy":
        return policy_versions
    return ("v1",)


def resources_in(group: str, version: str, policy_versions: tuple[str, ...]) -> list[ResourceType]:
    """Resource types served at ``group/version``; empty when that version is not served."""
    if version not in group_versions(group, policy_versions):
        return []
    return [rt for rt in RESOURCES if rt.group == group]


def api_version_of(rt: ResourceType, version: str) -> str:
    return f"{rt.group}/{version}" if rt.group else version


def _entry(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rt.name,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(ALL_VERBS),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def _sub_entry(rt: ResourceType, sub: str) -> dict[str, Any]:
    return {"name": f"{rt.name}/{sub}", "singularName": "", "namespaced": rt.namespaced,
            "kind": rt.kind, "verbs": list(STATUS_VERBS)}


def resource_list(group: str, version: str, policy_versions: tuple[str, ...]) -> dict[str, Any] | None:
    """The APIResourceList for ``/api/v1`` or ``/apis/<group>/<version>``; None when not served."""
    types = resources_in(group, version, policy_versions)
    if not types:
        return None
    entries: list[dict[str, Any]] = []
    for rt in types:
        entries.append(_entry(rt))
        if rt is PODS and policy_versions:
            # kubectl drain looks for exactly this entry; its version picks the Eviction body's
            # apiVersion. Without it kubectl falls back to plain DELETE.
            entries.append({"name": "pods/eviction", "singularName": "", "namespaced": True,
                            "group": "policy", "version": policy_versions[0], "kind": "Eviction",
                            "verbs": ["create"]})
        if rt.has_status:
            entries.append(_sub_entry(rt, "status"))
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": entries}


def api_versions(server_address: str) -> dict[str, Any]:
    """``GET /api``."""
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def api_group(group: str, policy_versions: tuple[str, ...]) -> dict[str, Any] | None:
    """``GET /apis/<group>``; None for an unknown or unserved group."""
    if group not in {rt.group for rt in RESOURCES if rt.group}:
        return None
    versions = group_versions(group, policy_versions)
    if not versions:
        return None
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": listed,
            "preferredVersion": listed[0]}


def api_group_list(policy_versions: tuple[str, ...]) -> dict[str, Any]:
    """``GET /apis``."""
    groups = []
    for group in sorted({rt.group for rt in RESOURCES if rt.group}):
        doc = api_group(group, policy_versions)
        if doc is not None:
            del doc["kind"], doc["apiVersion"]
            groups.append(doc)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def version_info(git_version: str) -> dict[str, Any]:
    """``GET /version``; ``git_version`` like ``v1.37.0`` or ``v1.20.2``."""
    core = git_version.lstrip("v").split("-")[0].split("+")[0]
    major, minor = (core.split(".") + ["0", "0"])[:2]
    return {"major": major, "minor": minor, "gitVersion": git_version, "gitCommit": "emulator",
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
            "compiler": "gc", "platform": "linux/amd64"}
