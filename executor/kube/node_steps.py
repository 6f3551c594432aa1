"""The Kubernetes node steps: exclude from load balancers, cordon and taint, undo, see what is left.

Every step is idempotent and re-derived from the cluster's real state, so an
executor restarted mid-drain simply runs the recipe again.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from executor.kube import conditions
from executor.kube.api import Conflict, KubeApi, KubeError, NotOwnNode, TooManyRequests, Unreachable
from executor.kube.node_patch import (
    A_NOTICE,
    cordon_patch,
    exclude_lb_patch,
    taint_patch,
    untaint_patch,
    withdraw_patch,
)
from executor.kube.pod_filters import pod_key, pods_that_count

CONFLICT_RETRIES = 8


def _patch_with_retry(api: KubeApi, make_patch: Callable[[dict[str, Any]], dict[str, Any] | None],
                      taints: bool = False) -> bool:
    """Read, compute, patch with the read resourceVersion; on 409 read again. True if it patched.
    ``taints``: the patch goes as the taint identity (``KubeApi.patch_node_taints``)."""
    return _patch_and_read(api, make_patch, taints)[0]


def _patch_and_read(api: KubeApi, make_patch: Callable[[dict[str, Any]], dict[str, Any] | None],
                    taints: bool = False, first: dict[str, Any] | None = None) -> tuple[bool, dict[str, Any]]:
    """``_patch_with_retry``, and the Node as it is afterwards (the PATCH's answer, or the node read
    when there was nothing to patch): the next step's input without another GET. ``first``: the Node
    as the last write answered it, tried before any GET (its resourceVersion is in the patch, so a
    Node changed since is a 409, and the retry reads it)."""
    patch_node = api.patch_node_taints if taints else api.patch_node
    for _ in range(CONFLICT_RETRIES):
        node, first = (first, None) if first is not None else (api.get_node(), None)
        patch = make_patch(node)
        if patch is None:
            return False, node
        try:
            return True, patch_node(api.node, patch)
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


def refused(e: KubeError) -> bool:
    """An answer that trying again will not change (401/403/404/400/415/422): the condition is said
    as refused and the drain goes on. A 429, a 409 or a 5xx is retried by the caller's loop."""
    return not isinstance(e, (TooManyRequests, Conflict)) and 400 <= e.status < 500


def cordon_and_taint(api: KubeApi, taint_key: str, kind: str, notice_id: str, deadline: str,  # noqa: PLR0913 -- the notice's parts by name
                     source: str = "", *, clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """Cordon, say why on the Node (``NoticeScheduled``, naming this notice), and taint. If the
    identity may not taint (a node identity without the separate taint credential), the node stays
    cordoned without the taint -- the cordon alone already keeps new pods away; if the server
    refuses the condition, the node is cordoned and tainted without it. Returns what was done, for
    the drain.cordoned event."""
    patched, node = _patch_and_read(api, lambda node: cordon_patch(node, taint_key, kind, notice_id, deadline,
                                                                   with_taint=False))
    done, node = _set_scheduled(api, kind, notice_id, source, deadline, clock=clock, node=node)
    try:
        # From the Node the last write answered: no GET between the cordon and the taint.
        tainted = _patch_and_read(api, lambda node: taint_patch(node, taint_key, kind), taints=True, first=node)[0]
        done.update(patched=patched or tainted or done["condition_patched"], tainted=True)
    except KubeError as e:
        if not taint_refused(e):
            raise
        done.update(patched=patched or done["condition_patched"], tainted=False, taint_refused=e.message[:300])
    return done


def set_scheduled(api: KubeApi, kind: str, notice_id: str, source: str, deadline: str,  # noqa: PLR0913 -- the notice's parts by name
                  clock: Callable[[], float] = time.time, *, node: dict[str, Any] | None = None) -> dict[str, Any]:
    """``NoticeScheduled`` True naming this notice, on ``nodes/status`` as the node identity
    (executor.kube.conditions). A write is made only when the condition says something else.
    ``node``: the Node just read or patched (None: read it)."""
    return _set_scheduled(api, kind, notice_id, source, deadline, clock=clock, node=node)[0]


def _set_scheduled(api: KubeApi, kind: str, notice_id: str, source: str, deadline: str,  # noqa: PLR0913 -- as set_scheduled
                   *, clock: Callable[[], float], node: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``set_scheduled``, and the Node as it is afterwards (the status PATCH's answer, or the Node
    it started from when nothing was written)."""
    current = api.get_node() if node is None else node
    patch = conditions.scheduled_patch(current, kind, notice_id, source, deadline, clock())
    if patch is None:
        return {"condition": conditions.NOTICE_SCHEDULED, "condition_patched": False}, current
    try:
        after = api.patch_node_status(api.node, patch)
    except KubeError as e:
        if not refused(e):
            raise
        return {"condition": "", "condition_patched": False, "condition_refused": e.message[:300]}, current
    return {"condition": conditions.NOTICE_SCHEDULED, "condition_patched": True}, after


def withdraw_scheduled(api: KubeApi, notice_id: str, clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """``NoticeScheduled`` False, ``Withdrawn``: the last notice is gone. Left alone while the node's
    marks name another notice (its withdrawal turns it)."""
    node = api.get_node()
    marked_by = ((node.get("metadata") or {}).get("annotations") or {}).get(A_NOTICE)
    patch = conditions.withdrawn_patch(node, notice_id, clock(), marked_by)
    if patch is None:
        return {"condition_withdrawn": False}
    try:
        api.patch_node_status(api.node, patch)
    except KubeError as e:
        if not refused(e):
            raise
        return {"condition_withdrawn": False, "condition_refused": e.message[:300]}
    return {"condition_withdrawn": True}


def exclude_from_lb(api: KubeApi) -> bool:
    return _patch_with_retry(api, exclude_lb_patch)


def withdraw(api: KubeApi, taint_key: str, notice_id: str, clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """Our taint off (as the taint identity, while the notice annotation still says it is ours),
    ``NoticeScheduled`` turned False (as the node, while the annotation still names the notice: an
    executor restarted in between does it again), then the cordon, annotations and label (as the
    node). What was done, for the drain.uncordoned event."""
    untainted = _patch_with_retry(api, lambda node: untaint_patch(node, taint_key, notice_id), taints=True)
    done = withdraw_scheduled(api, notice_id, clock)
    opened = _patch_with_retry(api, lambda node: withdraw_patch(node, taint_key, notice_id, with_taint=False))
    return {"patched": untainted or opened or done["condition_withdrawn"], **done}


def uncordon(api: KubeApi, taint_key: str, notice_id: str) -> bool:
    """``withdraw``; True if anything was patched."""
    return bool(withdraw(api, taint_key, notice_id)["patched"])


def mark_disruption_target(api: KubeApi, pod: dict[str, Any], message: str,
                           clock: Callable[[], float] = time.time) -> str:
    """The pod's ``DisruptionTarget`` (``TerminationByNodeAgent``) on ``pods/status`` as the node
    identity, before the agent deletes it, as one blocking call (the drain's loop sends the same
    request without blocking: ``drain_io``). "" when it is set (or already was); else why not."""
    patch = conditions.disruption_target_patch(pod, clock(), message)
    if patch is None:
        return ""
    try:
        api.patch_pod_status(pod, patch)
    except (KubeError, Unreachable, NotOwnNode) as e:
        return str(e)[:300]
    return ""


def remaining_pods(api: KubeApi) -> list[str]:
    return sorted(pod_key(p) for p in pods_that_count(api.list_pods()))
