"""The node's NoticeScheduled and a deleted pod's DisruptionTarget, as pure patches (executor/kube/conditions.py)."""
from __future__ import annotations

from typing import Any

from common.timefmt import format_rfc3339
from executor.kube import conditions
from executor.kube.conditions import disruption_target_patch, scheduled_patch, withdrawn_patch

T0 = 1_900_000_000.0
DEADLINE = "2030-01-01T00:00:00.000Z"
KUBELET = [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": "2029-01-01T00:00:00Z"}]


def node(*conds: dict[str, Any], annotation: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "node-a"}
    if annotation:
        md["annotations"] = {"sco.io/notice-id": annotation}
    return {"metadata": md, "status": {"conditions": [*KUBELET, *conds]}}


def applied(n: dict[str, Any], patch: dict[str, Any] | None) -> dict[str, Any]:
    """The strategic merge the server does for conditions (merge key ``type``)."""
    assert patch is not None
    (new,) = patch["status"]["conditions"]
    kept = [c for c in n["status"]["conditions"] if c["type"] != new["type"]]
    return {**n, "status": {"conditions": [*kept, new]}}


def scheduled(n: dict[str, Any]) -> dict[str, Any]:
    found = conditions.condition_of(n, conditions.NOTICE_SCHEDULED)
    assert found is not None
    return found


def test_the_condition_is_exactly_what_design_section_9_gives():
    patch = scheduled_patch(node(), "reclaim", "aws-0123", "aws", DEADLINE, T0)
    assert patch == {"status": {"conditions": [{
        "type": "NoticeScheduled", "status": "True", "reason": "Reclaim",
        "message": f"notice aws-0123 from aws, deadline {DEADLINE}",
        "lastHeartbeatTime": format_rfc3339(T0, millis=False),
        "lastTransitionTime": format_rfc3339(T0, millis=False)}]}}
    # Only our one entry travels: the kubelet's conditions are left to the server's merge by type.
    assert [c["type"] for c in patch["status"]["conditions"]] == ["NoticeScheduled"]


def test_every_kind_is_a_camel_case_reason():
    assert [conditions.camel_case(k) for k in ("reclaim", "rebalance", "maintenance", "live_migration", "pause")] \
        == ["Reclaim", "Rebalance", "Maintenance", "LiveMigration", "Pause"]


def test_the_same_notice_again_writes_nothing():
    n = applied(node(), scheduled_patch(node(), "reclaim", "r", "aws", DEADLINE, T0))
    assert scheduled_patch(n, "reclaim", "r", "aws", DEADLINE, T0 + 60) is None


def test_repointing_to_another_notice_keeps_the_transition_time():
    """True stays True (a takeover, or one of two cancelled): only the heartbeat moves, as the kubelet
    keeps LastTransitionTime while a condition's status is unchanged."""
    n = applied(node(), scheduled_patch(node(), "maintenance", "m", "aws", DEADLINE, T0))
    n = applied(n, scheduled_patch(n, "reclaim", "r", "relay", DEADLINE, T0 + 30))
    c = scheduled(n)
    assert (c["status"], c["reason"], c["message"]) == ("True", "Reclaim", f"notice r from relay, deadline {DEADLINE}")
    assert c["lastTransitionTime"] == format_rfc3339(T0, millis=False)
    assert c["lastHeartbeatTime"] == format_rfc3339(T0 + 30, millis=False)


def test_withdrawn_turns_false_with_a_new_transition_time():
    n = applied(node(annotation="r"), scheduled_patch(node(), "reclaim", "r", "aws", DEADLINE, T0))
    n = applied(n, withdrawn_patch(n, "r", T0 + 10, marked_by="r"))
    c = scheduled(n)
    assert (c["status"], c["reason"]) == ("False", "Withdrawn") and "r" in c["message"]
    assert c["lastTransitionTime"] == format_rfc3339(T0 + 10, millis=False)
    assert withdrawn_patch(n, "r", T0 + 20, marked_by=None) is None   # already False: nothing to write
    # True again later (a new notice): a new transition.
    n = applied(n, scheduled_patch(n, "reclaim", "r2", "aws", DEADLINE, T0 + 30))
    assert scheduled(n)["lastTransitionTime"] == format_rfc3339(T0 + 30, millis=False)


def test_withdrawal_leaves_a_condition_that_another_notices_marks_own():
    n = applied(node(), scheduled_patch(node(), "reclaim", "r", "aws", DEADLINE, T0))
    assert withdrawn_patch(n, "m", T0, marked_by="r") is None
    assert withdrawn_patch(node(), "m", T0, marked_by=None) is None   # never set: nothing to turn


def test_disruption_target_once():
    pod = {"metadata": {"name": "db-0"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    patch = disruption_target_patch(pod, T0, "deleted by sco-agent")
    assert patch == {"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "TerminationByNodeAgent",
        "message": "deleted by sco-agent", "lastTransitionTime": format_rfc3339(T0, millis=False)}]}}
    assert disruption_target_patch(applied(pod, patch), T0 + 1, "again") is None
    # The server's own (an eviction on 1.26+) counts as set too.
    evicted = {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}}
    assert disruption_target_patch(evicted, T0, "x") is None
