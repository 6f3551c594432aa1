"""End-to-end checks against a real kube-apiserver v1.20.2 (Node,RBAC + NodeRestriction).

These pin down the server behaviour the agent relies on and the emulator copies: a node identity's
scope, the PDB-guarded eviction answers, graceful deletion, and a real `kubectl drain`.
"""
from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.emulators.kube_fixture import kubectl as run_kubectl
from tests.rigs.kube_real_fixture import real_apiserver
from tests.rigs.kube_real_objects import (
    FakeControlPlane,
    KubeClient,
    create_node,
    create_pdb,
    create_running_pod,
    ensure_namespace,
    pdb_status,
    write_pdb_status,
)
from tests.rigs.kube_real_rig import RealApiServer
from tests.support.wait import wait_for

NODE_A, NODE_B = "node-a", "node-b"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApiServer]:
    with real_apiserver(tmp_path_factory.mktemp("kube"), node_names=(NODE_A, NODE_B)) as server:
        admin = server.client()
        for node in (NODE_A, NODE_B):
            create_node(admin, node)
        admin.close()
        yield server


@pytest.fixture()
def ns(admin: KubeClient) -> str:
    """A fresh namespace per test (no namespace controller: they are never cleaned, only unique)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    ensure_namespace(admin, name)
    return name


def kubectl(kubeconfig: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return run_kubectl(kubeconfig, tmp / "kcache", *args, timeout=120)


def evict(client: KubeClient, ns: str, pod: str) -> Any:
    return client.request("POST", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", {
        "apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns},
    })


def settle_pdb(admin: KubeClient, ns: str, name: str) -> dict[str, Any]:
    """Write the PDB status the disruption controller would, from the pods now in `ns`."""
    pdb = admin.must("GET", f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/{name}")
    pods = admin.must("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    return write_pdb_status(admin, pdb, pdb_status(pdb, pods))["status"]


def test_node_identity_cordons_its_own_node_only(kube: RealApiServer, admin: KubeClient, tmp_path: Path) -> None:
    """NodeRestriction: node-a's kubeconfig may cordon node-a, and gets 403 Forbidden on node-b."""
    own = kubectl(kube.nodes[NODE_A].kubeconfig, "cordon", NODE_A, tmp=tmp_path)
    assert own.returncode == 0, own.stderr
    assert admin.must("GET", f"/api/v1/nodes/{NODE_A}")["spec"].get("unschedulable") is True

    # kubectl 1.37 reports a refused cordon on stderr but still exits 0, so read the message...
    other = kubectl(kube.nodes[NODE_A].kubeconfig, "cordon", NODE_B, tmp=tmp_path)
    assert f'nodes "{NODE_B}" is forbidden: node "{NODE_A}" is not allowed to modify node "{NODE_B}"' \
        in other.stderr
    assert not admin.must("GET", f"/api/v1/nodes/{NODE_B}")["spec"].get("unschedulable")
    # ...and pin the status code with the same strategic-merge PATCH kubectl sends.
    resp = kube.node_client(NODE_A).request("PATCH", f"/api/v1/nodes/{NODE_B}", {"spec": {"unschedulable": True}},
                                            content_type="application/strategic-merge-patch+json")
    assert resp.status_code == 403, resp.text
    assert resp.json()["reason"] == "Forbidden"


def test_node_identity_cannot_evict_pods_of_another_node(kube: RealApiServer, admin: KubeClient, ns: str) -> None:
    """A node identity evicting a pod bound elsewhere gets 403, and the pod is untouched."""
    create_running_pod(admin, ns, "elsewhere", NODE_B)
    node_a = kube.node_client(NODE_A)
    resp = evict(node_a, ns, "elsewhere")
    assert resp.status_code == 403, resp.text
    assert "can only evict pods with spec.nodeName set to itself" in resp.json()["message"]
    assert "deletionTimestamp" not in admin.must("GET", f"/api/v1/namespaces/{ns}/pods/elsewhere")["metadata"]


def test_eviction_refused_by_pdb_with_no_disruptions_allowed(kube: RealApiServer, admin: KubeClient,
                                                              ns: str) -> None:
    """disruptionsAllowed 0 -> 429 TooManyRequests with a DisruptionBudget cause; the pod stays."""
    create_running_pod(admin, ns, "only", NODE_A, labels={"app": "db"})
    create_pdb(admin, ns, "db", {"app": "db"}, min_available=1)
    status = settle_pdb(admin, ns, "db")
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (1, 1, 0)

    resp = evict(kube.node_client(NODE_A), ns, "only")
    assert resp.status_code == 429, resp.text
    body = resp.json()
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [{
        "reason": "DisruptionBudget",
        "message": "The disruption budget db needs 1 healthy pods and has 1 currently",
    }]
    assert "deletionTimestamp" not in admin.must("GET", f"/api/v1/namespaces/{ns}/pods/only")["metadata"]


def test_eviction_success_leaves_pod_terminating_until_the_kubelet_finishes(
        kube: RealApiServer, admin: KubeClient, ns: str) -> None:
    """201 Success; the bound pod is Terminating (the PDB budget spent) until the kubelet deletes it."""
    create_running_pod(admin, ns, "web-1", NODE_A, labels={"app": "web"})
    create_running_pod(admin, ns, "web-2", NODE_B, labels={"app": "web"})
    create_pdb(admin, ns, "web", {"app": "web"}, min_available=1)
    assert settle_pdb(admin, ns, "web")["disruptionsAllowed"] == 1

    resp = evict(kube.node_client(NODE_A), ns, "web-1")
    assert resp.status_code == 201, resp.text
    assert resp.json()["status"] == "Success"
    pod = admin.must("GET", f"/api/v1/namespaces/{ns}/pods/web-1")
    assert pod["metadata"]["deletionTimestamp"]  # Terminating: no kubelet has finished it yet
    pdb = admin.must("GET", f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/web")
    assert pdb["status"]["disruptionsAllowed"] == 0
    assert "web-1" in pdb["status"]["disruptedPods"]

    kubelet = FakeControlPlane(kube.client, nodes=[NODE_A], disruption=False)
    kubelet.step(admin)
    assert kubelet.finished == [f"{ns}/web-1"] and kubelet.errors == []
    assert admin.request("GET", f"/api/v1/namespaces/{ns}/pods/web-1").status_code == 404
    assert admin.request("GET", f"/api/v1/namespaces/{ns}/pods/web-2").status_code == 200


def test_kubectl_drain_completes_with_the_fake_kubelet(kube: RealApiServer, admin: KubeClient, ns: str,
                                                       tmp_path: Path) -> None:
    """Real `kubectl drain` evicts every non-DaemonSet pod of the node under a PDB, and no other."""
    for node in ("drain-1", "drain-2"):
        create_node(admin, node)
    ds = admin.must("POST", f"/apis/apps/v1/namespaces/{ns}/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"ds": "agent"}}, "template": {
            "metadata": {"labels": {"ds": "agent"}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
    })
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": ds["metadata"]["uid"],
             "controller": True}
    create_running_pod(admin, ns, "agent-1", "drain-1", labels={"ds": "agent"}, owner=owner)
    create_running_pod(admin, ns, "web-1", "drain-1", labels={"app": "web"})
    create_running_pod(admin, ns, "web-2", "drain-1", labels={"app": "web"}, empty_dir=True)
    create_running_pod(admin, ns, "loner", "drain-1")
    create_running_pod(admin, ns, "web-3", "drain-2", labels={"app": "web"})
    create_pdb(admin, ns, "web", {"app": "web"}, min_available=1)

    with FakeControlPlane(kube.client) as plane:
        wait_for(lambda: (admin.must("GET", f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/web")
                          .get("status", {}).get("disruptionsAllowed") == 2), 30, "the PDB status")
        done = kubectl(kube.admin.kubeconfig, "drain", "drain-1", "--ignore-daemonsets",
                       "--delete-emptydir-data", "--force", "--timeout=90s", tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    # Evicted through policy/v1beta1 (the version 1.20 advertises), not kubectl's DELETE fallback.
    assert {f"evicting pod {ns}/{name}" for name in ("web-1", "web-2", "loner")} <= set(done.stdout.splitlines())
    assert plane.errors == []
    left = admin.must("GET", "/api/v1/pods", params={"fieldSelector": "spec.nodeName=drain-1"})["items"]
    assert sorted(p["metadata"]["name"] for p in left) == ["agent-1"]
    assert admin.request("GET", f"/api/v1/namespaces/{ns}/pods/web-3").status_code == 200
    assert admin.must("GET", "/api/v1/nodes/drain-1")["spec"]["unschedulable"] is True
    assert sorted(plane.finished) == sorted(f"{ns}/{name}" for name in ("web-1", "web-2", "loner"))
