"""The Kubernetes drain recipe: cordon and taint this node, then see what is left on it.

Every step is idempotent and re-derived from the cluster's real state, so an
executor restarted mid-drain simply runs the recipe again.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from executor.kube import Conflict, KubeApi
from executor.node_patch import cordon_patch, withdraw_patch
from executor.pod_filters import pod_key, pods_that_count

CONFLICT_RETRIES = 8


def _patch_with_retry(api: KubeApi, make_patch: Callable[[dict[str, Any]], dict[str, Any] | None]) -> bool:
    """Read, compute, patch with the read resourceVersion; on 409 read again. True if it patched."""
    for _ in range(CONFLICT_RETRIES):
        node = api.get_node()
        patch = make_patch(node)
        if patch is None:
            return False
        try:
            api.patch_node(api.node, patch)
            return True
        except Conflict:
            continue
    raise Conflict(409, "Conflict", f"node {api.node}: still conflicting after {CONFLICT_RETRIES} tries")


def cordon(api: KubeApi, taint_key: str, kind: str, notice_id: str, deadline: str) -> bool:
    return _patch_with_retry(api, lambda node: cordon_patch(node, taint_key, kind, notice_id, deadline))


def uncordon(api: KubeApi, taint_key: str, notice_id: str) -> bool:
    return _patch_with_retry(api, lambda node: withdraw_patch(node, taint_key, notice_id))


def remaining_pods(api: KubeApi) -> list[str]:
    return sorted(pod_key(p) for p in pods_that_count(api.list_pods()))
