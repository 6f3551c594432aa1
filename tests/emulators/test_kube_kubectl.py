"""Fidelity: the real kubectl (v1.37) driving the emulator, which runs as a subprocess."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.emulators.kube import objects as o
from tests.emulators.kube_fixture import KubeEmuError, KubeEmulator, kube_emulator

DRAIN = ("drain", "n1", "--ignore-daemonsets", "--delete-emptydir-data")
SMP = "application/strategic-merge-patch+json"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeEmulator]:
    with kube_emulator(tmp_path, grace_cap=0.2) as emu:
        emu.add_node("n1")
        emu.add_node("n2")
        yield emu


def _patches(kube: KubeEmulator, node: str) -> list[dict]:
    return [e for e in kube.requests() if e["method"] == "PATCH" and e["path"].startswith(f"/api/v1/nodes/{node}")]


# ----- (a) get, cordon, uncordon, taint, create, delete -----
def test_get_nodes_prints_the_server_side_table(kube: KubeEmulator) -> None:
    kube.add_node("n3", ready=False, labels={"node-role.kubernetes.io/worker": ""})
    out = kube.kubectl("get", "nodes", check=True).stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    rows = {line.split()[0]: line.split()[1:3] for line in out[1:]}
    assert rows == {"n1": ["Ready", "<none>"], "n2": ["Ready", "<none>"], "n3": ["NotReady", "worker"]}


def test_cordon_then_uncordon(kube: KubeEmulator) -> None:
    assert kube.kubectl("cordon", "n1", check=True).stdout.strip() == "node/n1 cordoned"
    assert kube.node("n1")["spec"]["unschedulable"] is True
    (patch,) = _patches(kube, "n1")
    assert patch["headers"]["content-type"] == SMP and patch["body"] == {"spec": {"unschedulable": True}}
    assert "Ready,SchedulingDisabled" in kube.kubectl("get", "node", "n1", check=True).stdout
    assert kube.kubectl("cordon", "n1", check=True).stdout.strip() == "node/n1 already cordoned"
    assert kube.kubectl("uncordon", "n1", check=True).stdout.strip() == "node/n1 uncordoned"
    assert not kube.node("n1")["spec"].get("unschedulable")


def test_taint_sends_the_whole_list_and_adds_to_existing_taints(kube: KubeEmulator) -> None:
    kube.add_node("n3", taints=[{"key": "a", "value": "b", "effect": "NoSchedule"}])
    kube.kubectl("taint", "nodes", "n3", "c=d:NoExecute", check=True)
    assert kube.node("n3")["spec"]["taints"] == [{"key": "c", "value": "d", "effect": "NoExecute"},
                                                  {"key": "a", "value": "b", "effect": "NoSchedule"}]
    (patch,) = _patches(kube, "n3")
    assert patch["headers"]["content-type"] == SMP and len(patch["body"]["spec"]["taints"]) == 2  # the complete list
    kube.kubectl("taint", "nodes", "n3", "a-", check=True)
    assert kube.node("n3")["spec"]["taints"] == [{"key": "c", "value": "d", "effect": "NoExecute"}]


def test_create_get_and_delete_a_pod(kube: KubeEmulator, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(o.pod("p", "n1", phase=None)))
    assert kube.kubectl("create", "-f", str(manifest), check=True).stdout.strip() == "pod/p created"
    kube.wait_for(lambda: kube.get("/api/v1/namespaces/default/pods/p")["status"]["phase"] == "Running")
    assert kube.kubectl("get", "pod", "p", "-o", "jsonpath={.status.phase}", check=True).stdout == "Running"
    # Graceful deletion: kubectl waits (watch-list) until the simulated kubelet removes the pod.
    assert kube.kubectl("delete", "pod", "p", check=True).returncode == 0
    assert kube.request("GET", "/api/v1/namespaces/default/pods/p")[0] == 404
    missing = kube.kubectl("get", "pod", "p")
    assert missing.returncode == 1 and 'pods "p" not found' in missing.stderr


# ----- (b) drain -----
def _seed_drain_scenario(kube: KubeEmulator) -> None:
    kube.seed(
        o.daemonset("logs"),
        o.pod("web-1", "n1", labels={"app": "web"}, owner=o.owner_ref("ReplicaSet", "web-7c9")),
        o.pod("web-2", "n1", labels={"app": "web"}, owner=o.owner_ref("ReplicaSet", "web-7c9")),
        o.pod("db-1", "n1", labels={"app": "db"}, owner=o.owner_ref("ReplicaSet", "db-5f")),
        o.pod("db-2", "n1", labels={"app": "db"}, owner=o.owner_ref("ReplicaSet", "db-5f")),
        o.pod("db-3", "n2", labels={"app": "db"}, owner=o.owner_ref("ReplicaSet", "db-5f")),
        o.pdb("db", {"app": "db"}, max_unavailable=1),  # one disruption at a time
        o.pod("logs-n1", "n1", namespace="kube-system", owner=o.owner_ref("DaemonSet", "logs")),
        o.pod("kube-proxy-n1", "n1", namespace="kube-system", mirror=True,
              owner={"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "n1", "controller": True}),
        o.pod("cache", "n1", empty_dir=True, owner=o.owner_ref("ReplicaSet", "cache-9")),
        o.pod("web-3", "n2", labels={"app": "web"}, owner=o.owner_ref("ReplicaSet", "web-7c9")),
    )


def test_drain_ends_as_on_a_real_cluster(kube: KubeEmulator) -> None:
    _seed_drain_scenario(kube)
    n2_before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods("n2")}
    done = kube.kubectl(*DRAIN, "--timeout=60s")
    assert done.returncode == 0, done.stderr
    assert "node/n1 drained" in done.stdout
    assert "ignoring DaemonSet-managed Pods: kube-system/logs-n1" in done.stderr
    assert kube.node("n1")["spec"]["unschedulable"] is True
    assert kube.pod_names("n1") == {"logs-n1", "kube-proxy-n1"}
    n2_after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods("n2")}
    assert n2_before.items() <= n2_after.items()  # untouched; ReplicaSet replacements joined them
    evictions = kube.evictions()
    evicted = {name for _, name, code in evictions if code == 201}
    assert evicted == {"web-1", "web-2", "db-1", "db-2", "cache"}
    assert sorted(name for _, name, code in evictions if code == 201) == sorted(evicted)  # once each
    assert not {name for _, name, _ in evictions} & (set(n2_before) | {"logs-n1", "kube-proxy-n1"})
    # The budget let one db pod go first; the other was refused until a replacement was healthy.
    db = [(name, code) for _, name, code in evictions if name.startswith("db-")]
    refused = {name for name, code in db if code == 429}
    assert len(refused) == 1 and db[-1] == (refused.pop(), 201)
    bodies = [e["body"] for e in kube.requests() if e["path"].endswith("/eviction")]
    assert all(b["apiVersion"] == "policy/v1" and b["kind"] == "Eviction" for b in bodies)
    assert not [e for e in kube.requests() if e["method"] == "DELETE"]


def test_drain_against_a_1_20_server_uses_v1beta1_evictions(tmp_path: Path) -> None:
    with kube_emulator(tmp_path, policy_versions=("v1beta1",), server_version="v1.20.2") as kube:
        kube.add_node("n1")
        kube.add_pod("web-1", "n1", owner=("ReplicaSet", "web-7c9"))
        kube.add_pdb("web", {"app": "web"}, min_available=0, api_version="policy/v1beta1")
        assert kube.kubectl(*DRAIN, "--timeout=30s").returncode == 0
        (body,) = [e["body"] for e in kube.requests() if e["path"].endswith("/eviction")]
        assert body["apiVersion"] == "policy/v1beta1"
        assert kube.pod_names("n1") == set()


def test_drain_times_out_on_a_budget_that_never_allows(kube: KubeEmulator) -> None:
    kube.add_pod("db-1", "n1", labels={"app": "db"}, owner=("ReplicaSet", "db-5f"))
    kube.add_pdb("db", {"app": "db"}, max_unavailable=0)
    done = kube.kubectl(*DRAIN, "--timeout=2s")
    assert done.returncode != 0
    assert "global timeout reached" in done.stderr
    pod = kube.get("/api/v1/namespaces/default/pods/db-1")
    assert "deletionTimestamp" not in pod["metadata"] and pod["status"]["phase"] == "Running"
    assert {code for _, _, code in kube.evictions()} == {429}


def test_drain_refuses_unmanaged_pods_without_force(kube: KubeEmulator) -> None:
    kube.add_pod("bare", "n1")
    done = kube.kubectl(*DRAIN, "--timeout=10s")
    assert done.returncode != 0 and "cannot delete Pods that declare no controller" in done.stderr
    assert kube.evictions() == [] and kube.pod_names("n1") == {"bare"}


def test_drain_without_eviction_support_falls_back_to_delete(tmp_path: Path) -> None:
    """No pods/eviction in discovery: kubectl DELETEs, with protobuf DeleteOptions."""
    with kube_emulator(tmp_path, policy_versions=()) as kube:
        kube.add_node("n1")
        kube.add_pod("web-1", "n1", owner=("ReplicaSet", "web-7c9"), grace=20)
        assert kube.kubectl(*DRAIN, "--timeout=30s", "--grace-period=3").returncode == 0
        (delete,) = [e for e in kube.requests() if e["method"] == "DELETE"]
        assert delete["path"] == "/api/v1/namespaces/default/pods/web-1"
        assert delete["body"]["gracePeriodSeconds"] == 3 and kube.evictions() == []
        assert kube.pod_names("n1") == set()


def test_create_namespace_through_the_typed_protobuf_client(kube: KubeEmulator) -> None:
    assert kube.kubectl("create", "namespace", "team-a", check=True).stdout.strip() == "namespace/team-a created"
    assert kube.get("/api/v1/namespaces/team-a")["status"]["phase"] == "Active"


# ----- the fixture's process-level knobs -----
def test_token_map_accepts_the_agent_token_and_refuses_the_rest(tmp_path: Path) -> None:
    """client-go reads kubeconfig credentials only for TLS servers, so kubectl talks to the
    plain-HTTP emulator anonymously: with a token map it is refused, as it would be by a
    real server with anonymous auth off. Token checks are for the agent's own client."""
    with kube_emulator(tmp_path, tokens={"agent-token": "system:serviceaccount:sco:agent"},
                       token="agent-token") as kube:
        kube.add_node("n1")
        assert kube.request("GET", "/api/v1/nodes/n1")[0] == 200
        refused = kube.kubectl("get", "node", "n1")
        assert refused.returncode != 0 and "provide credentials" in refused.stderr
        assert {(e["user"], e["status"]) for e in kube.requests()} >= {("system:serviceaccount:sco:agent", 200),
                                                                  (None, 401)}


def test_api_down_refuses_kubectl_until_up(kube: KubeEmulator) -> None:
    kube.down("refuse")
    failed = kube.kubectl("get", "nodes", "--request-timeout=5s")
    assert failed.returncode != 0 and "connection refused" in failed.stderr
    kube.up()
    assert kube.kubectl("get", "node", "n1", "-o", "name", check=True).stdout.strip() == "node/n1"


def test_fixture_reports_a_failed_start(tmp_path: Path) -> None:
    with pytest.raises(KubeEmuError, match="policy_versions"), kube_emulator(tmp_path, policy_versions=("v9",)):
        pass
