"""The Kubernetes node steps: exclude from load balancers, cordon and taint, undo, see what is left.

Every step is idempotent and re-derived from the cluster's real state, so an
executor restarted mid-drain simply runs the recipe again.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from executor.kube.api import Conflict, KubeApi, KubeError
from executor.kube.node_patch import cordon_patch, exclude_lb_patch, taint_patch, untaint_patch, withdraw_patch
from executor.kube.pod_filters import pod_key, pods_that_count

CONFLICT_RETRIES = 8


def _patch_with_retry(api: KubeApi, make_patch: Callable[[dict[str, Any]], dict[str, Any] | None],
                      taints: bool = False) -> bool:
    """Read, compute, patch with the read resourceVersion; on 409 read again. True if it patched.
    ``taints``: the patch goes as the taint identity (``KubeApi.patch_node_taints``)."""
    patch_node = api.patch_node_taints if taints else api.patch_node
    for _ in range(CONFLICT_RETRIES):
        node = api.get_node()
        patch = make_patch(node)
        if patch is None:
            return False
        try:
            patch_node(api.node, patch)
            return True
        except Conflict:
            continue
    raise Conflict(409, "Conflict", f"node {api.node}: still conflicting after {CONFLICT_RETRIES} tries")


def cordon(api: KubeApi, taint_key: str, kind: str, notice_id: str, deadline: str,
           with_taint: bool = True) -> bool:
    """Cordon (and annotate) as the node identity, then taint as the taint identity: one identity
    per request, each doing what its authority covers."""
    patched = _patch_with_retry(api, lambda node: cordon_patch(node, taint_key, kind, notice_id, deadline,
                                                               with_taint=False))
    if with_taint:
        patched = _patch_with_retry(api, lambda node: taint_patch(node, taint_key, kind), taints=True) or patched
    return patched


def taint_refused(e: KubeError) -> bool:
    """NodeRestriction's answer to a node identity changing its own taints."""
    return e.status == 403 and "taint" in e.message


def cordon_and_taint(api: KubeApi, taint_key: str, kind: str, notice_id: str, deadline: str) -> dict[str, Any]:
    """Cordon and taint; if the identity may not taint (a node identity without the separate taint
    credential), the node stays cordoned without the taint -- the cordon alone already keeps new
    pods away. Returns what was done, for the drain.cordoned event."""
    patched = cordon(api, taint_key, kind, notice_id, deadline, with_taint=False)
    try:
        tainted = _patch_with_retry(api, lambda node: taint_patch(node, taint_key, kind), taints=True)
        return {"patched": patched or tainted, "tainted": True}
    except KubeError as e:
        if not taint_refused(e):
            raise
        return {"patched": patched, "tainted": False, "taint_refused": e.message[:300]}


def exclude_from_lb(api: KubeApi) -> bool:
    return _patch_with_retry(api, exclude_lb_patch)


def uncordon(api: KubeApi, taint_key: str, notice_id: str) -> bool:
    """Our taint off (as the taint identity, while the notice annotation still says it is ours),
    then the cordon, annotations and label (as the node)."""
    untainted = _patch_with_retry(api, lambda node: untaint_patch(node, taint_key, notice_id), taints=True)
    return _patch_with_retry(api, lambda node: withdraw_patch(node, taint_key, notice_id, with_taint=False)) \
        or untainted


def remaining_pods(api: KubeApi) -> list[str]:
    return sorted(pod_key(p) for p in pods_that_count(api.list_pods()))
