"""deploy/kubernetes/flowschema-*.yaml on a real kube-apiserver v1.20.2 (APF is beta and on by default
in 1.20: the rig passes no --enable-priority-and-fairness=false and no feature gate).

The server says which FlowSchema and PriorityLevelConfiguration classified a request in the response
headers X-Kubernetes-PF-FlowSchema-UID / X-Kubernetes-PF-PriorityLevel-UID; these tests compare them
with the UIDs of the applied objects. They also pin the shape of an APF rejection on 1.20 -- 429,
``Retry-After: 1``, a plain-text body, no Status -- which the agent must not take for a PDB refusal.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.http import TlsFiles
from executor.kube.api import KubeApi, Throttled
from tests.emulators.kube_fixture import kubectl
from tests.rigs.kube_real_fixture import real_apiserver
from tests.rigs.kube_real_objects import KubeClient, create_node, create_running_pod, ensure_namespace
from tests.rigs.kube_real_rig import RealApiServer
from tests.support.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1beta1"
NODE, FLOODED = "fs-node", "fs-flooded"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApiServer]:
    base = tmp_path_factory.mktemp("kube-fs")
    with real_apiserver(base, node_names=(NODE, FLOODED)) as server:
        admin = server.client()
        create_node(admin, NODE)
        for manifest in ("rbac.yaml", "flowschema-v1beta1.yaml"):
            proc = kubectl(server.admin.kubeconfig, base / "kcache", "apply", "-f",
                           str(REPO / "deploy/kubernetes" / manifest), timeout=120)
            assert proc.returncode == 0, proc.stderr
        admin.close()
        yield server


def pf(headers: object) -> tuple[str, str]:
    get = headers.get  # type: ignore[attr-defined]
    return get("X-Kubernetes-PF-FlowSchema-UID", ""), get("X-Kubernetes-PF-PriorityLevel-UID", "")


def uids(admin: KubeClient, name: str) -> tuple[str, str]:
    fs = admin.must("GET", f"{FLOWCONTROL}/flowschemas/{name}")
    level = fs["spec"]["priorityLevelConfiguration"]["name"]
    pl = admin.must("GET", f"{FLOWCONTROL}/prioritylevelconfigurations/{level}")
    return fs["metadata"]["uid"], pl["metadata"]["uid"]


def test_the_flowschema_is_accepted_and_points_at_its_level(admin: KubeClient) -> None:
    fs = admin.must("GET", f"{FLOWCONTROL}/flowschemas/sco-agent")
    assert fs["spec"]["matchingPrecedence"] < admin.must(
        "GET", f"{FLOWCONTROL}/flowschemas/system-nodes")["spec"]["matchingPrecedence"]
    assert fs["spec"]["distinguisherMethod"] == {"type": "ByUser"}
    dangling = [c for c in fs.get("status", {}).get("conditions", []) if c["type"] == "Dangling"]
    assert dangling and dangling[0]["status"] == "False", fs.get("status")


def test_the_agents_requests_are_classified_into_its_level_and_the_kubelets_are_not(
        kube: RealApiServer, admin: KubeClient) -> None:
    ours, system_nodes = uids(admin, "sco-agent"), uids(admin, "system-nodes")
    ensure_namespace(admin, "fs-work")
    create_running_pod(admin, "fs-work", "p1", NODE)
    node = kube.node_client(NODE)
    evict = node.request("POST", "/api/v1/namespaces/fs-work/pods/p1/eviction", {
        "apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "p1", "namespace": "fs-work"}})
    assert evict.status_code == 201 and pf(evict.headers) == ours
    cordon = node.request("PATCH", f"/api/v1/nodes/{NODE}", {"spec": {"unschedulable": True}},
                          content_type="application/strategic-merge-patch+json")
    assert cordon.status_code == 200 and pf(cordon.headers) == ours
    pdbs = node.request("GET", "/apis/policy/v1beta1/namespaces/fs-work/poddisruptionbudgets?limit=100")
    assert pdbs.status_code == 200 and pf(pdbs.headers) == ours
    # What a kubelet also sends as its node stays with the kubelets (built-in system-nodes).
    pods = node.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}")
    assert pods.status_code == 200 and pf(pods.headers) == system_nodes
    # The taint service account: every request of it.
    token = admin.must("POST", "/api/v1/namespaces/sco-system/serviceaccounts/sco-agent/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}})
    sa = KubeClient(kube.url, token["status"]["token"], kube.ca_file)
    got = sa.request("GET", f"/api/v1/nodes/{NODE}")
    assert got.status_code == 200 and pf(got.headers) == ours
    node.close()
    sa.close()


def test_a_kubelets_lease_renewal_stays_in_the_system_level_beside_the_flowschema(
        kube: RealApiServer, admin: KubeClient) -> None:
    """bench.fleet renews every node's Lease as a kubelet does (bench/fleet_lease.py): the sco-agent
    FlowSchema takes only what a kubelet never sends as its node, so a renewal -- create, then
    UPDATE of the Lease in kube-node-lease -- stays with the kubelets' system-nodes schema."""
    system_nodes = uids(admin, "system-nodes")
    node = kube.node_client(NODE)
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    created = node.request("POST", path, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": NODE, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00.000000Z"}})
    assert created.status_code == 201 and pf(created.headers) == system_nodes
    lease = created.json()
    lease["spec"]["renewTime"] = "2026-01-01T00:00:10.000000Z"
    renewed = node.request("PUT", f"{path}/{NODE}", lease)
    assert renewed.status_code == 200 and pf(renewed.headers) == system_nodes
    node.close()


def test_an_apf_rejection_on_1_20_is_plain_text_with_retry_after_and_the_agent_calls_it_throttling(
        kube: RealApiServer, admin: KubeClient) -> None:
    # A one-seat level that rejects instead of queueing, for one node identity only.
    admin.must("POST", f"{FLOWCONTROL}/prioritylevelconfigurations", {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1beta1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": "fs-tiny"},
        "spec": {"type": "Limited", "limited": {"assuredConcurrencyShares": 1, "limitResponse": {"type": "Reject"}}}})
    admin.must("POST", f"{FLOWCONTROL}/flowschemas", {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1beta1", "kind": "FlowSchema", "metadata": {"name": "fs-tiny"},
        "spec": {"priorityLevelConfiguration": {"name": "fs-tiny"}, "matchingPrecedence": 300,
                 "distinguisherMethod": {"type": "ByUser"},
                 "rules": [{"subjects": [{"kind": "User", "user": {"name": f"system:node:{FLOODED}"}}],
                            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                               "namespaces": ["*"], "clusterScope": True}]}]}})
    wait_for(lambda: pf(kube.node_client(FLOODED).request("GET", "/api/v1/namespaces").headers)[0]
             == uids(admin, "fs-tiny")[0], 30, "the fs-tiny schema in effect")
    api_calls: list[BaseException | None] = []
    rejections: list[tuple[int, dict[str, str], str]] = []

    def flood() -> None:
        client = kube.node_client(FLOODED)
        api = KubeApi(kube.url, FLOODED, kube.nodes[FLOODED].token, tls=TlsFiles(ca_file=str(kube.ca_file)))
        try:
            for _ in range(40):
                resp = client.request("GET", "/api/v1/pods")
                if resp.status_code == 429:
                    rejections.append((429, dict(resp.headers), resp.text))
                    try:
                        api.list_pods()
                        api_calls.append(None)
                    except Throttled as e:
                        api_calls.append(e)
                    return
        finally:
            client.close()
            api.close()

    threads = [threading.Thread(target=flood) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert rejections, "no APF rejection with 40 concurrent clients on a one-seat level"
    _, headers, body = rejections[0]
    assert headers["Retry-After"] == "1" and headers["Content-Type"].startswith("text/plain")
    assert body == "Too many requests, please try again later.\n"
    throttled = [e for e in api_calls if isinstance(e, Throttled)]
    if throttled:   # the agent's own client met one too: classified as throttling, Retry-After read
        assert throttled[0].retry_after == 1.0 and "Too many requests" in throttled[0].message


@pytest.mark.parametrize("version", ["v1beta2", "v1beta3", "v1"])
def test_the_newer_api_versions_say_the_same(version: str) -> None:
    """Only the 1.20 file can be applied here; the others must be the same objects in their version."""
    base = (REPO / "deploy/kubernetes/flowschema-v1beta1.yaml").read_text()
    other = (REPO / f"deploy/kubernetes/flowschema-{version}.yaml").read_text()
    body = base[base.index("---"):].replace("flowcontrol.apiserver.k8s.io/v1beta1", f"flowcontrol.apiserver.k8s.io/{version}")
    if version in ("v1beta3", "v1"):   # renamed in v1beta3 (KEP-1040), same meaning
        body = body.replace("assuredConcurrencyShares", "nominalConcurrencyShares")
    assert other[other.index("---"):] == body
