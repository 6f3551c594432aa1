"""Cordon/taint patches keep other taints, carry resourceVersion, and undo only our own work."""
from __future__ import annotations

from executor.kube.node_patch import A_CORDONED_BY_AGENT, A_NOTICE, cordon_patch, withdraw_patch

FOREIGN = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def node(unschedulable=False, taints=(), annotations=None, rv="42"):
    return {"metadata": {"name": "me", "resourceVersion": rv, "annotations": annotations or {}},
            "spec": {"unschedulable": unschedulable, "taints": list(taints)}}


def apply(n, patch):
    """Strategic merge as the server does it for these fields (taints replaced whole)."""
    out = {"metadata": dict(n["metadata"]), "spec": dict(n["spec"])}
    ann = dict(out["metadata"].get("annotations") or {})
    for k, v in (patch.get("metadata", {}).get("annotations") or {}).items():
        if v is None:
            ann.pop(k, None)
        else:
            ann[k] = v
    out["metadata"]["annotations"] = ann
    out["spec"].update(patch.get("spec", {}))
    return out


def test_cordon_keeps_foreign_taints_and_sends_rv():
    p = cordon_patch(node(taints=[FOREIGN]), "sco.io/notice", "reclaim", "n1", "D")
    assert p["metadata"]["resourceVersion"] == "42"
    assert p["spec"]["unschedulable"] is True
    assert FOREIGN in p["spec"]["taints"]
    assert {"key": "sco.io/notice", "value": "reclaim", "effect": "NoSchedule"} in p["spec"]["taints"]
    assert p["metadata"]["annotations"][A_CORDONED_BY_AGENT] == "true"


def test_cordon_is_idempotent():
    n = apply(node(taints=[FOREIGN]), cordon_patch(node(taints=[FOREIGN]), "k", "reclaim", "n1", "D"))
    assert cordon_patch(n, "k", "reclaim", "n1", "D") is None


def test_operator_cordon_is_not_claimed():
    p = cordon_patch(node(unschedulable=True), "k", "reclaim", "n1", "D")
    assert A_CORDONED_BY_AGENT not in p["metadata"]["annotations"]


def test_withdraw_undoes_own_cordon_and_taint_only():
    start = node(taints=[FOREIGN])
    n = apply(start, cordon_patch(start, "k", "reclaim", "n1", "D"))
    p = withdraw_patch(n, "k", "n1")
    after = apply(n, p)
    assert after["spec"]["unschedulable"] is False
    assert after["spec"]["taints"] == [FOREIGN]
    assert A_NOTICE not in after["metadata"]["annotations"]


def test_withdraw_keeps_operator_cordon():
    start = node(unschedulable=True)
    n = apply(start, cordon_patch(start, "k", "reclaim", "n1", "D"))
    p = withdraw_patch(n, "k", "n1")
    assert "unschedulable" not in p["spec"]
    assert apply(n, p)["spec"]["unschedulable"] is True


def test_withdraw_of_another_notice_does_nothing():
    start = node()
    n = apply(start, cordon_patch(start, "k", "reclaim", "n2", "D"))
    assert withdraw_patch(n, "k", "n1") is None
