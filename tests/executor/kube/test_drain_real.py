"""The drain against a real kube-apiserver v1.20.2 (Node,RBAC + NodeRestriction, policy/v1beta1).

The agent's drain code runs directly (DrainRunner with a KubeApi per thread) as the node identity
``system:node:<name>``, with deploy/kubernetes/rbac.yaml applied and, where a test says so, a
token of the sco-agent service account for the taint. A fake kubelet and disruption controller
(FakeControlPlane) finish graceful deletions and keep PDB status, which a controller-less 1.20
server would not. Each test drains its own node, in its own namespace.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.http import TlsFiles
from executor.kube.api import KubeApi, KubeError, NotOwnNode
from executor.kube.discovery import choose, listed_eviction, needs_group
from executor.kube.node_patch import EXCLUDE_LB_LABEL
from tests.executor.kube.harness import TAINT_KEY, Drain, make_spec
from tests.rigs.kube_real_fixture import agent_cluster, sa_token
from tests.rigs.kube_real_objects import (
    FakeControlPlane,
    KubeClient,
    create_pdb,
    create_running_pod,
)
from tests.rigs.kube_real_rig import RealApiServer

REPO = Path(__file__).resolve().parents[3]
NODES = ("node-a", "node-b", "node-c", "node-d", "node-e", "node-f")
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}   # set by the server itself


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApiServer]:
    with agent_cluster(tmp_path_factory.mktemp("kube"), NODES) as server:
        yield server


@pytest.fixture(scope="module")
def taint_token(kube: RealApiServer) -> str:
    """A token of the sco-agent service account (TokenRequest; 1.20 cannot bind it to a Node)."""
    return sa_token(kube)


def node_api(kube: RealApiServer, node: str, taint_token: str = "") -> KubeApi:
    return KubeApi(kube.url, node, kube.nodes[node].token, tls=TlsFiles(ca_file=str(kube.ca_file)), timeout_s=5.0,
                   node_token=taint_token)


def drain(kube: RealApiServer, drains: list[Drain], node: str, taint_token: str = "", **kw) -> Drain:
    d = Drain(lambda: node_api(kube, node, taint_token), make_spec(**kw))
    drains.append(d)
    return d


def pod_names(admin: KubeClient, node: str) -> set[str]:
    pods = admin.must("GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"})["items"]
    return {p["metadata"]["name"] for p in pods}


def critical_pod(admin: KubeClient, name: str, node: str) -> None:
    admin.must("POST", "/api/v1/namespaces/kube-system/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "priorityClassName": "system-node-critical",
                 "containers": [{"name": "main", "image": "busybox"}]}})
    pod = admin.must("GET", f"/api/v1/namespaces/kube-system/pods/{name}")
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    admin.must("PUT", f"/api/v1/namespaces/kube-system/pods/{name}/status", pod)


def test_drain_as_the_node_identity_with_the_taint_credential(kube, admin, ns, drains, taint_token):
    """Cordon + taint (keeping the server's own taint), PDB-paced evictions, critical pods last,
    DaemonSet and mirror pods and the other node untouched; node empty."""
    node, other = "node-a", "node-b"
    for i in range(3):
        create_running_pod(admin, ns, f"web-{i}", node, labels={"app": "web"})
    create_pdb(admin, ns, "web", {"app": "web"}, max_unavailable=1)
    create_running_pod(admin, ns, "solo", node)
    critical_pod(admin, f"dns-{ns}", node)
    ds_owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": str(uuid.uuid4()),
                "controller": True}
    create_running_pod(admin, ns, "agent-a", node, owner=ds_owner)
    admin.must("POST", f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "static-a", "annotations": {"kubernetes.io/config.mirror": "hash"}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]}})
    create_running_pod(admin, ns, "elsewhere", other)
    with FakeControlPlane(kube.client, nodes=[node]) as plane:
        d = drain(kube, drains, node, taint_token)
        d.wait_state("done", timeout=60)
    assert plane.errors == []
    order = [e["pod"] for e in d.events("drain.evicted")]
    assert sorted(order[:4]) == sorted(f"{ns}/{n}" for n in ("web-0", "web-1", "web-2", "solo"))
    assert order[4:] == [f"kube-system/dns-{ns}"]
    assert [e["pdb"] for e in d.events("drain.evicted") if "web" in e["pod"]] == [f"{ns}/web"] * 3
    assert pod_names(admin, node) == {"agent-a", "static-a"}
    assert pod_names(admin, other) >= {"elsewhere"}
    n = admin.must("GET", f"/api/v1/nodes/{node}")
    assert n["spec"]["unschedulable"] is True
    assert n["spec"]["taints"] == [NOT_READY, {"key": TAINT_KEY, "value": "reclaim", "effect": "NoSchedule"}]
    assert d.events("drain.cordoned")[0]["tainted"] is True
    assert not any(getattr(r, "name", "") == "drain.pdbs_unreadable" for r in d.reports)   # rbac.yaml lets nodes read PDBs


def test_node_identity_alone_cordons_and_labels_but_may_not_taint(kube, admin, ns, drains):
    node = "node-c"
    create_running_pod(admin, ns, "app", node)
    with FakeControlPlane(kube.client, nodes=[node], disruption=False):
        d = drain(kube, drains, node, exclude_from_lb=True)
        d.wait_state("done", timeout=60)
    ev = d.events("drain.cordoned")[0]
    assert ev["tainted"] is False and "not allowed to modify taints" in ev["taint_refused"]
    assert ev["lb_excluded"] is True
    n = admin.must("GET", f"/api/v1/nodes/{node}")
    assert n["spec"]["unschedulable"] is True and n["spec"]["taints"] == [NOT_READY]
    assert n["metadata"]["labels"][EXCLUDE_LB_LABEL] == "true"


def test_pdb_blocked_pod_is_reported_at_the_cutoff(kube, admin, ns, drains):
    node = "node-d"
    create_running_pod(admin, ns, "db-0", node, labels={"app": "db"})
    create_pdb(admin, ns, "db", {"app": "db"}, min_available=1)
    with FakeControlPlane(kube.client, nodes=[node]):
        d = drain(kube, drains, node, evict_s=2.0)
        ev = d.wait_event("drain.eviction_blocked", timeout=30)
    # The node identity watches the PDB (deploy/kubernetes/rbac.yaml) and sees 0 allowed all
    # along, so at the cutoff its lane is stuck and the pod reported without a request.
    assert ev["pod"] == f"{ns}/db-0" and ev["pdb"] == f"{ns}/db" and ev["attempts"] == 0
    assert ev["since_received_ms"] >= 2000
    assert "db-0" in pod_names(admin, node)


def test_pdb_blocked_pod_is_deleted_at_the_cutoff_by_the_node_identity(kube, admin, ns, drains):
    node = "node-e"
    create_running_pod(admin, ns, "db-0", node, labels={"app": "db"})
    create_pdb(admin, ns, "db", {"app": "db"}, min_available=1)
    with FakeControlPlane(kube.client, nodes=[node]):
        # Cutoff 15 s after receipt: the pod's own 30 s grace is capped to what is left.
        d = drain(kube, drains, node, evict_s=1.5, deadline_in=20.0, margin_s=5.0, pdb_blocked="delete")
        d.wait_state("done", timeout=30)
    (ev,) = d.events("drain.deleted")
    assert ev["pod"] == f"{ns}/db-0" and 10 <= ev["grace_s"] <= 14
    assert "db-0" not in pod_names(admin, node)


def test_acting_on_another_node_is_refused_by_the_agent_and_by_the_server(kube, admin, ns):
    theirs = create_running_pod(admin, ns, "theirs", "node-b")
    own = node_api(kube, "node-f")
    with pytest.raises(NotOwnNode):       # the agent's own check: no request is made
        own.evict_pod(theirs)
    with pytest.raises(NotOwnNode):
        own.patch_node("node-b", {"spec": {"unschedulable": True}})
    # A misconfigured agent (node name node-b, node-f's credentials) passes its own check;
    # NodeRestriction refuses it.
    confused = KubeApi(kube.url, "node-b", kube.nodes["node-f"].token, tls=TlsFiles(ca_file=str(kube.ca_file)))
    with pytest.raises(KubeError) as refused:
        confused.evict_pod(theirs)
    assert refused.value.status == 403 and "can only evict pods with spec.nodeName set to itself" in \
        refused.value.message
    with pytest.raises(KubeError) as refused:
        confused.patch_node("node-b", {"spec": {"unschedulable": True}})
    assert refused.value.status == 403
    with pytest.raises(KubeError) as refused:
        confused.delete_pod(theirs, 1)
    assert refused.value.status == 403
    pod = admin.must("GET", f"/api/v1/namespaces/{ns}/pods/theirs")
    assert "deletionTimestamp" not in pod["metadata"]
    assert not admin.must("GET", "/api/v1/nodes/node-b")["spec"].get("unschedulable")


def test_the_real_servers_discovery_names_the_eviction_version_the_agent_sends(kube, admin):
    """What executor/kube/discovery.py reads, as kube-apiserver 1.20.2 lists it: pods/eviction in
    /api/v1 as policy/v1beta1 (1.22+ list policy/v1), and the policy group serving v1beta1 only."""
    listed = listed_eviction(admin.must("GET", "/api/v1"))
    assert listed == "policy/v1beta1" and not needs_group(listed)
    group = admin.must("GET", "/apis/policy")
    assert [v["version"] for v in group["versions"]] == ["v1beta1"]
    assert choose(listed, group).version == "v1beta1"
    assert node_api(kube, "node-a").eviction_support().version == "v1beta1"


def etcd_pod_lists(admin: KubeClient) -> float:
    """How many LISTs of pods this kube-apiserver has sent to etcd: its own
    ``etcd_request_duration_seconds_count{operation="list"}`` for the pod list type (1.20's etcd3 store
    records each list it reads from etcd under ``*[]core.Pod``; the watch cache's answers are not
    etcd requests). Read line by line: tests/support/promtext is strict for our own exposition and
    refuses the server's (its summaries' samples have no declared family)."""
    text = admin.request("GET", "/metrics").text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("etcd_request_duration_seconds_count{") and 'operation="list"' in line \
                and 'type="*[]core.Pod"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_the_confirming_list_is_answered_from_the_watch_cache_without_reading_etcd(kube, admin):
    """The empty-node confirmation (``resourceVersion=<the watch's>&resourceVersionMatch=NotOlderThan``,
    no ``limit``) costs no etcd read on 1.20.2, where the consistent LIST it replaced read every pod of
    the cluster from etcd: counted on the server's own etcd request metric, each list twice over."""
    api = node_api(kube, "node-a")
    try:
        _, rv = api.list_pods_at("0")
        before = etcd_pod_lists(admin)
        for _ in range(2):
            api.list_pods_at(rv, not_older_than=True)
        from_cache = etcd_pod_lists(admin) - before
        before = etcd_pod_lists(admin)
        for _ in range(2):   # the former confirmation: no resourceVersion, a quorum read
            admin.must("GET", "/api/v1/pods", params={"fieldSelector": "spec.nodeName=node-a"})
        consistent = etcd_pod_lists(admin) - before
    finally:
        api.close()
    assert consistent == 2, "the metric does not count what this test relies on"
    assert from_cache == 0


def test_the_real_server_confirms_from_its_cache_and_answers_a_version_it_lacks_with_its_own_504(kube):
    """What the emulator models (tests/emulators/kube/api.py ``_wait_until_fresh``), on 1.20.2: a
    list not older than the version a watch reached is served; one ahead of the cache waits 3 s and
    is answered 504 "Too large resource version" -- a failed list to the drain, not an outage."""
    api = node_api(kube, "node-a")
    try:
        _, rv = api.list_pods_at("0")
        api.list_pods_at(rv, not_older_than=True)
        with pytest.raises(KubeError) as failed:
            api.list_pods_at(str(int(rv) + 100000), not_older_than=True)
        assert failed.value.status == 504 and "Too large resource version" in failed.value.message
    finally:
        api.close()
