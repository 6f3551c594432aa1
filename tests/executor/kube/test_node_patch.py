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


def test_the_taint_alone_is_a_patch_of_taints_only_for_the_taint_identity():
    from executor.kube.node_patch import taint_patch

    own = {"key": "sco.io/notice", "value": "reclaim", "effect": "NoSchedule"}
    stale = {"key": "sco.io/notice", "value": "maintenance", "effect": "NoSchedule"}
    p = taint_patch(node(taints=[FOREIGN, stale]), "sco.io/notice", "reclaim")
    assert p == {"metadata": {"resourceVersion": "42"}, "spec": {"taints": [FOREIGN, own]}}
    assert taint_patch(node(taints=[FOREIGN, own]), "sco.io/notice", "reclaim") is None


def test_the_withdrawal_splits_into_an_untaint_and_the_rest():
    from executor.kube.node_patch import untaint_patch

    own = {"key": "sco.io/notice", "value": "reclaim", "effect": "NoSchedule"}
    n = node(unschedulable=True, taints=[FOREIGN, own], annotations={A_NOTICE: "n1", A_CORDONED_BY_AGENT: "true"})
    untaint = untaint_patch(n, "sco.io/notice", "n1")
    assert untaint == {"metadata": {"resourceVersion": "42"}, "spec": {"taints": [FOREIGN]}}
    rest = withdraw_patch(apply(n, untaint), "sco.io/notice", "n1", with_taint=False)
    assert rest is not None and "taints" not in rest["spec"] and rest["spec"]["unschedulable"] is False
    assert withdraw_patch(n, "sco.io/notice", "n1", with_taint=False)["spec"] == {"unschedulable": False}
    # Another notice holds the node now: its taint is not ours to take.
    other = node(taints=[own], annotations={A_NOTICE: "n2"})
    assert untaint_patch(other, "sco.io/notice", "n1") is None
    assert untaint_patch(node(taints=[FOREIGN]), "sco.io/notice", "n1") is None
