"""Pure decisions about the Node object: what patch cordons and taints it, and what undoes it.

Taints are replaced whole by the server (NodeSpec.Taints has no patch
strategy), so a patch carries the complete list -- everybody else's taints
plus ours -- and the node's resourceVersion, so a concurrent change makes the
server answer 409 instead of losing somebody's taint. Annotations record what
the agent itself did, so a withdrawn notice undoes only that, never an
operator's cordon.

A node identity (``system:node:<name>``) may not change its own taints
(NodeRestriction); ``cordon_patch(..., with_taint=False)`` is the cordon it may
do, and ``taint_patch``/``untaint_patch`` are the taint alone, for the taint
credential (one identity per request: see executor.kube.api). The load-balancer exclusion label is one NodeRestriction lets a node set
(``node.kubernetes.io/`` is a kubelet label namespace).
"""
from __future__ import annotations

from typing import Any

ANNOTATION_PREFIX = "sco.io/"
A_NOTICE = ANNOTATION_PREFIX + "notice-id"
A_DEADLINE = ANNOTATION_PREFIX + "notice-deadline"
A_CORDONED_BY_AGENT = ANNOTATION_PREFIX + "cordoned-by-agent"
A_LB_EXCLUDED_BY_AGENT = ANNOTATION_PREFIX + "lb-excluded-by-agent"
EXCLUDE_LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"


def _taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def _annotations(node: dict[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("annotations") or {})


def _labels(node: dict[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def exclude_lb_patch(node: dict[str, Any]) -> dict[str, Any] | None:
    """Label the node out of external load balancers; None if it already is. Labels merge by key,
    so no resourceVersion is needed; the annotation says the label is ours to take back."""
    if EXCLUDE_LB_LABEL in _labels(node):
        return None
    return {"metadata": {"labels": {EXCLUDE_LB_LABEL: "true"},
                         "annotations": {A_LB_EXCLUDED_BY_AGENT: "true"}}}


def is_cordoned(node: dict[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def has_taint(node: dict[str, Any], key: str) -> bool:
    return any(t.get("key") == key for t in _taints(node))


def cordon_patch(node: dict[str, Any], taint_key: str, taint_value: str, notice_id: str,
                 deadline: str, with_taint: bool = True) -> dict[str, Any] | None:
    """The patch that cordons and taints the node for this notice; None if it already is.
    ``with_taint=False``: cordon and annotate only, leaving every taint as it is."""
    own = {"key": taint_key, "value": taint_value, "effect": "NoSchedule"}
    taints = _taints(node)
    annotations = _annotations(node)
    already = (
        is_cordoned(node)
        and (not with_taint or any(t.get("key") == taint_key and t.get("value") == taint_value
                                   and t.get("effect") == "NoSchedule" for t in taints))
        and annotations.get(A_NOTICE) == notice_id
        and annotations.get(A_DEADLINE) == deadline
    )
    if already:
        return None
    new_annotations = {A_NOTICE: notice_id, A_DEADLINE: deadline}
    if not is_cordoned(node):
        new_annotations[A_CORDONED_BY_AGENT] = "true"
    spec: dict[str, Any] = {"unschedulable": True}
    if with_taint:
        spec["taints"] = [t for t in taints if t.get("key") != taint_key] + [own]
    return {
        "metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion", ""),
                     "annotations": new_annotations},
        "spec": spec,
    }


def taint_patch(node: dict[str, Any], taint_key: str, taint_value: str) -> dict[str, Any] | None:
    """Our taint alone (every other taint kept, the resourceVersion pinned); None if it is there."""
    own = {"key": taint_key, "value": taint_value, "effect": "NoSchedule"}
    taints = _taints(node)
    if own in taints:
        return None
    return {"metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion", "")},
            "spec": {"taints": [t for t in taints if t.get("key") != taint_key] + [own]}}


def untaint_patch(node: dict[str, Any], taint_key: str, notice_id: str) -> dict[str, Any] | None:
    """Our taint removed for a withdrawn ``notice_id``; None if there is none, or the node now
    carries another notice (whose taint it is)."""
    if _annotations(node).get(A_NOTICE) not in (None, notice_id) or not has_taint(node, taint_key):
        return None
    return {"metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion", "")},
            "spec": {"taints": [t for t in _taints(node) if t.get("key") != taint_key]}}


def withdraw_patch(node: dict[str, Any], taint_key: str, notice_id: str,
                   with_taint: bool = True) -> dict[str, Any] | None:
    """Undo what the agent did for ``notice_id``: its taint always, the cordon and the
    load-balancer label only if they were ours. ``with_taint=False``: leave the taints
    (``untaint_patch`` takes ours away, as the taint identity)."""
    annotations = _annotations(node)
    if annotations.get(A_NOTICE) not in (None, notice_id):
        return None   # the node now carries another notice; leave it alone
    ours = annotations.get(A_CORDONED_BY_AGENT) == "true"
    lb_ours = annotations.get(A_LB_EXCLUDED_BY_AGENT) == "true"
    tainted = with_taint and has_taint(node, taint_key)
    if not tainted and not ours and not lb_ours and A_NOTICE not in annotations:
        return None
    patch: dict[str, Any] = {
        "metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion", ""),
                     "annotations": {A_NOTICE: None, A_DEADLINE: None, A_CORDONED_BY_AGENT: None}},
        "spec": {},
    }
    if tainted:
        # Only when there is one to take away: a node identity may not send taints at all.
        patch["spec"]["taints"] = [t for t in _taints(node) if t.get("key") != taint_key]
    if ours:
        patch["spec"]["unschedulable"] = False
    if lb_ours:
        patch["metadata"]["labels"] = {EXCLUDE_LB_LABEL: None}
        patch["metadata"]["annotations"][A_LB_EXCLUDED_BY_AGENT] = None
    return patch
