"""Why the node is being emptied, said where the cluster looks: two conditions (pure: objects in, patches out).

**The Node's ``NoticeScheduled``** (DESIGN.md section 9, "The node says why"): ``status: "True"``,
``reason`` the notice kind in CamelCase (``Reclaim``, ``Rebalance``, ``Maintenance``), ``message``
naming the notice id, its source and its deadline (RFC 3339); set with the cordon, pointed at
whichever notice governs the drain, and turned ``status: "False"``, ``reason: Withdrawn`` when the
last notice is cancelled. It is written as node-problem-detector writes its conditions
(pkg/exporters/k8sexporter/problemclient/problem_client.go, ``SetConditions``/``generatePatch``):
a strategic-merge PATCH of ``{"status": {"conditions": [...]}}`` on the ``nodes/status``
subresource. NodeStatus.Conditions has the patch strategy merge with the merge key ``type``, so
the server merges our one entry into the list and the kubelet's own (Ready, MemoryPressure, ...)
stay as they are; no resourceVersion is needed. ``lastTransitionTime`` changes only when the
status does, as the kubelet does for its own (pkg/kubelet/nodestatus/setters.go, ReadyCondition:
the old LastTransitionTime is kept while the status is unchanged); ``lastHeartbeatTime`` is the
time of each write, as node-problem-detector sets it.

**A pod's ``DisruptionTarget``** (DESIGN.md section 9, "Pods the agent deletes"): ``status:
"True"``, ``reason: TerminationByNodeAgent``, patched on ``pods/status`` before the agent
DELETEs the pod, so a Job's ``podFailurePolicy`` (``onPodConditions: [{type: DisruptionTarget}]``)
tells a reclaim from a failure. PodStatus.Conditions merges by ``type`` too. The type and the
reason's shape are the API's own (staging/src/k8s.io/api/core/v1/types.go: ``DisruptionTarget``
"indicates the pod is about to be terminated due to a disruption"; reasons such as
``TerminationByKubelet``, ``PreemptionByScheduler``, and ``EvictionByEvictionAPI`` which the
eviction handler sets on 1.26+).
"""
from __future__ import annotations

from typing import Any

from common.timefmt import format_rfc3339

NOTICE_SCHEDULED = "NoticeScheduled"
WITHDRAWN = "Withdrawn"
DISRUPTION_TARGET = "DisruptionTarget"
BY_NODE_AGENT = "TerminationByNodeAgent"


def camel_case(kind: str) -> str:
    """A notice kind as a condition reason: ``live_migration`` -> ``LiveMigration``."""
    return "".join(part[:1].upper() + part[1:] for part in kind.replace("-", "_").split("_") if part) or "Unknown"


def notice_message(notice_id: str, source: str, deadline_text: str) -> str:
    return f"notice {notice_id} from {source or 'unknown'}, deadline {deadline_text}"


def _conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in (obj.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]


def condition_of(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    """The object's condition of type ``ctype`` (a Node's or a Pod's), or None."""
    return next((c for c in _conditions(obj) if c.get("type") == ctype), None)


def _status_patch(current: dict[str, Any] | None, status: str, reason: str, message: str,
                  now: float) -> dict[str, Any] | None:
    """The strategic-merge patch writing one NodeCondition; None when it already says exactly that."""
    if current is not None and (current.get("status"), current.get("reason"), current.get("message")) == (
            status, reason, message):
        return None
    stamp = format_rfc3339(now, millis=False)
    since = current.get("lastTransitionTime") if current is not None and current.get("status") == status else None
    return {"status": {"conditions": [{
        "type": NOTICE_SCHEDULED, "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": stamp, "lastTransitionTime": since or stamp}]}}


def scheduled_patch(node: dict[str, Any], kind: str, notice_id: str, source: str, deadline_text: str,
                    now: float) -> dict[str, Any] | None:
    """``NoticeScheduled`` True for this notice (the one the drain serves now); None if it already says so."""
    return _status_patch(condition_of(node, NOTICE_SCHEDULED), "True", camel_case(kind),
                         notice_message(notice_id, source, deadline_text), now)


def withdrawn_patch(node: dict[str, Any], notice_id: str, now: float,
                    marked_by: str | None) -> dict[str, Any] | None:
    """``NoticeScheduled`` False, ``Withdrawn``, for the last notice, ``notice_id``; None if there is
    nothing to turn (no condition, or already False) or the node's marks now name another notice
    (``marked_by``: the ``sco.io/notice-id`` annotation, None when absent) -- then that notice's own
    withdrawal turns it, as with the cordon (node_patch.withdraw_patch)."""
    current = condition_of(node, NOTICE_SCHEDULED)
    if current is None or current.get("status") != "True" or marked_by not in (None, notice_id):
        return None
    return _status_patch(current, "False", WITHDRAWN, f"notice {notice_id} withdrawn; no notice remains", now)


def disruption_target_patch(pod: dict[str, Any], now: float, message: str) -> dict[str, Any] | None:
    """The pod's ``DisruptionTarget`` True, ``TerminationByNodeAgent`` (strategic merge on
    ``pods/status``); None if it already carries a True one (ours or the server's)."""
    current = condition_of(pod, DISRUPTION_TARGET)
    if current is not None and current.get("status") == "True":
        return None
    return {"status": {"conditions": [{
        "type": DISRUPTION_TARGET, "status": "True", "reason": BY_NODE_AGENT, "message": message[:1000],
        "lastTransitionTime": format_rfc3339(now, millis=False)}]}}
