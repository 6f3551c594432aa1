"""Per-pod drain policy and the pods kubectl refuses (common/pod_policy.py): decision tables."""
from __future__ import annotations

import math

import pytest

from common.pod_policy import HOLD, MOVE, SKIP, Rules, decide, skip_honoured, skipped_by_wish, wish_of

DEADLINE = 10_000.0
RS = [{"kind": "ReplicaSet", "name": "web", "uid": "rs-1", "controller": True}]


def pod(annotations=None, *, owner=RS, grace=None, empty_dir=False, phase="Running"):
    md = {"name": "p", "namespace": "default", "uid": "u-p", "annotations": dict(annotations or {})}
    if owner:
        md["ownerReferences"] = owner
    spec = {"containers": [{"name": "c"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}}]
    return {"metadata": md, "spec": spec, "status": {"phase": phase}}


def rules(kind, evict_s=50, **kw):
    return Rules(kind, DEADLINE, evict_s, **kw)


@pytest.mark.parametrize(("annotations", "wish"), [
    ({}, "evict"),
    ({"sco.io/drain": "evict"}, "evict"),
    ({"sco.io/drain": "skip"}, "skip"),
    ({"sco.io/drain": "wait-completed"}, "wait-completed"),
    ({"sco.io/drain": "SKIP"}, "evict"),                      # an unknown value: the default
    ({"karpenter.sh/do-not-disrupt": "true"}, "skip"),
    ({"karpenter.sh/do-not-disrupt": "false"}, "evict"),
    ({"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}, "skip"),
    ({"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}, "evict"),
    ({"sco.io/drain": "evict", "karpenter.sh/do-not-disrupt": "true"}, "evict"),   # our own annotation wins
])
def test_the_wish_read_from_annotations(annotations, wish):
    assert wish_of(pod(annotations)) == wish


def test_a_pod_with_malformed_metadata_is_an_ordinary_pod():
    assert wish_of({"metadata": {"annotations": ["not", "a", "map"]}}) == "evict"
    assert wish_of({}) == "evict"


# (kind, annotations, extra pod settings, contract local_pods) -> (action, reason, until)
INF = math.inf
TABLE = [
    ("rebalance", {}, {}, {}, MOVE, "", 0.0),
    ("rebalance", {"sco.io/drain": "skip"}, {}, {}, SKIP, "wish:skip", 0.0),
    ("maintenance", {"karpenter.sh/do-not-disrupt": "true"}, {}, {}, SKIP, "wish:skip", 0.0),
    ("maintenance", {"sco.io/drain": "wait-completed"}, {}, {}, HOLD, "wish:wait-completed", INF),
    # kubectl's default: emptyDir and no controller are kept (and reported), the flags let them go
    ("rebalance", {}, {"empty_dir": True}, {}, HOLD, "local_storage", INF),
    ("rebalance", {}, {"empty_dir": True}, {"delete_emptydir_data": True}, MOVE, "", 0.0),
    ("maintenance", {}, {"owner": None}, {}, HOLD, "unreplicated", INF),
    ("maintenance", {}, {"owner": None}, {"force": True}, MOVE, "", 0.0),
    ("maintenance", {}, {"owner": None, "empty_dir": True}, {"force": True}, HOLD, "local_storage", INF),
    # a reclaim: the wish holds until deadline - the pod's grace, capped by evict_s; then it moves
    ("reclaim", {}, {}, {}, MOVE, "", 0.0),
    ("reclaim", {"sco.io/drain": "skip"}, {"grace": 20}, {}, HOLD, "wish:skip", DEADLINE - 20),
    ("reclaim", {"sco.io/drain": "wait-completed"}, {"grace": 20}, {}, HOLD, "wish:wait-completed", DEADLINE - 20),
    ("reclaim", {"sco.io/drain": "skip"}, {"grace": 600}, {}, HOLD, "wish:skip", DEADLINE - 50),   # capped
    ("reclaim", {"sco.io/drain": "skip"}, {}, {}, HOLD, "wish:skip", DEADLINE - 30),   # the API's default grace
    ("reclaim", {}, {"empty_dir": True, "owner": None}, {}, MOVE, "", 0.0),   # whatever the contract says
]


@pytest.mark.parametrize(("kind", "annotations", "extra", "local", "action", "reason", "until"), TABLE)
def test_decision_table(kind, annotations, extra, local, action, reason, until):
    d = decide(pod(annotations, **extra), rules(kind, **local))
    assert (d.action, d.reason, d.until) == (action, reason, until)


def test_a_reclaim_says_what_is_lost_with_each_pod():
    assert decide(pod(empty_dir=True), rules("reclaim")).lost == ("emptyDir:scratch",)
    assert decide(pod(owner=None), rules("reclaim")).lost == ("unreplicated: no controller recreates it",)
    assert decide(pod(), rules("reclaim")).lost == ()
    # a non-controller owner is no controller (metav1.GetControllerOf)
    owned = pod(owner=[{"kind": "ConfigMap", "name": "x", "uid": "c"}])
    assert decide(owned, rules("reclaim")).lost == ("unreplicated: no controller recreates it",)


def test_skip_is_honoured_by_every_kind_but_reclaim():
    assert [skip_honoured(k) for k in ("reclaim", "rebalance", "maintenance")] == [False, True, True]


def test_the_verifier_and_the_executor_agree_on_which_pods_skip_leaves():
    """The verifier's list is exactly the pods the plan leaves on a rebalance."""
    pods = [pod({"sco.io/drain": "skip"}), pod(), pod({"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}),
            pod({"sco.io/drain": "wait-completed"})]
    assert [p for p in pods if decide(p, rules("rebalance")).action == SKIP] == skipped_by_wish(pods)
