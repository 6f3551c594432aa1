"""The emulator holds a node identity to the Node authorizer and NodeRestriction (kube/node_identity.py).

The same requests are compared with the real kube-apiserver 1.20.2 in
tests/executor/kube/test_conditions_real.py; these run without it.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.emulators.kube_fixture import kube_emulator

SMP = "application/strategic-merge-patch+json"
TOKENS = {"tok-a": "system:node:node-a", "tok-admin": "admin"}
COND = {"status": {"conditions": [{"type": "NoticeScheduled", "status": "True", "reason": "Reclaim", "message": "m"}]}}


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with kube_emulator(tmp_path_factory.mktemp("emu-ids"), tokens=TOKENS, token="tok-admin") as kube:
        kube.add_node("node-a")
        kube.add_node("node-b")
        kube.add_pod("on-a", "node-a")
        kube.add_pod("on-b", "node-b")
        yield kube


def as_node(emu: Any, method: str, path: str, body: Any = None, ctype: str = SMP) -> tuple[int, Any]:
    return emu.request(method, path, body, ctype, headers={"Authorization": "Bearer tok-a"})


def test_its_own_status_merges_by_type_and_keeps_the_kubelets(emu):
    code, node = as_node(emu, "PATCH", "/api/v1/nodes/node-a/status", COND)
    assert code == 200
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready", "NoticeScheduled"]


def test_another_nodes_status_and_node_are_refused(emu):
    for path, body in (("/api/v1/nodes/node-b/status", COND), ("/api/v1/nodes/node-b", {"spec": {"unschedulable": True}})):
        code, doc = as_node(emu, "PATCH", path, body)
        assert code == 403 and doc["message"] == 'nodes "node-b" is forbidden: node "node-a" is not allowed to modify node "node-b"'
    assert "NoticeScheduled" not in [c["type"] for c in emu.node("node-b")["status"]["conditions"]]
    assert not emu.node("node-b")["spec"].get("unschedulable")


def test_its_own_taints_are_refused_its_cordon_is_not(emu):
    code, doc = as_node(emu, "PATCH", "/api/v1/nodes/node-a", {"spec": {"taints": [
        {"key": "sco.io/notice", "value": "reclaim", "effect": "NoSchedule"}]}})
    assert code == 403 and doc["message"].endswith('node "node-a" is not allowed to modify taints')
    assert as_node(emu, "PATCH", "/api/v1/nodes/node-a", {"spec": {"unschedulable": True}})[0] == 200


def test_pods_of_another_node_are_refused(emu):
    mark = {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByNodeAgent"}]}}
    assert as_node(emu, "PATCH", "/api/v1/namespaces/default/pods/on-a/status", mark)[0] == 200
    code, doc = as_node(emu, "PATCH", "/api/v1/namespaces/default/pods/on-b/status", mark)
    assert code == 403 and "can only update pod status for pods with spec.nodeName set to itself" in doc["message"]
    code, doc = as_node(emu, "POST", "/api/v1/namespaces/default/pods/on-b/eviction",
                        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "on-b"}}, "application/json")
    assert code == 403 and doc["message"].endswith("node node-a can only evict pods with spec.nodeName set to itself")
    code, doc = as_node(emu, "DELETE", "/api/v1/namespaces/default/pods/on-b", None, "application/json")
    assert code == 403 and "can only delete pods with spec.nodeName set to itself" in doc["message"]
    assert "on-b" in emu.pod_names("node-b")


def test_other_users_are_served_as_before(emu):
    code, _ = emu.request("PATCH", "/api/v1/nodes/node-b/status", COND, SMP)   # the admin token
    assert code == 200
