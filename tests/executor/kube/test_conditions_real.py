"""The node's NoticeScheduled and a pod's DisruptionTarget on a real kube-apiserver v1.20.2
(Node,RBAC + NodeRestriction, deploy/kubernetes/rbac.yaml applied), written by the agent's own code
as the node identity ``system:node:<name>``; and the emulator answering the same requests the same
way (tests/emulators/kube/node_identity.py).

What is checked against the server: the condition lands through ``nodes/status`` and the
kubelet's own conditions survive the strategic merge (merge key ``type``); it turns False,
``Withdrawn``, and its lastTransitionTime moves only then; another node's status is refused; the
node identity may patch ``pods/status`` of its own pods and is refused for another node's pod;
the agent's delete of a PDB-blocked pod is preceded by its DisruptionTarget (the audit log's
order).
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from common.http import TlsFiles
from executor.kube import conditions, node_steps
from executor.kube.api import KubeApi, KubeError
from executor.kube.node_patch import A_NOTICE
from tests.emulators.kube_fixture import kube_emulator
from tests.executor.kube.harness import TAINT_KEY, Drain, make_spec
from tests.rigs.kube_real_fixture import agent_cluster, sa_token
from tests.rigs.kube_real_objects import (
    FakeControlPlane,
    KubeClient,
    create_pdb,
    create_running_pod,
    ensure_namespace,
)
from tests.rigs.kube_real_rig import RealApiServer

NODES = ("cn-a", "cn-b", "cn-c")
DEADLINE = "2030-01-01T00:00:00.000Z"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApiServer]:
    with agent_cluster(tmp_path_factory.mktemp("kube-cond"), NODES) as server:
        yield server


def node_api(kube: RealApiServer, node: str, as_node: str | None = None) -> KubeApi:
    """The agent's client for ``node``, with ``as_node``'s credentials (a misconfigured agent)."""
    return KubeApi(kube.url, node, kube.nodes[as_node or node].token, tls=TlsFiles(ca_file=str(kube.ca_file)))


def scheduled(node: dict[str, Any]) -> dict[str, Any]:
    found = conditions.condition_of(node, conditions.NOTICE_SCHEDULED)
    assert found is not None, node["status"].get("conditions")
    return found


def audited(kube: RealApiServer, verb: str, resource: str, subresource: str = "") -> list[dict[str, Any]]:
    return [e for e in kube.audit() if e.get("stage") == "ResponseComplete" and e["verb"] == verb
            and e["objectRef"].get("resource") == resource and e["objectRef"].get("subresource", "") == subresource]


def test_the_condition_lands_beside_the_kubelets_and_is_withdrawn(kube, admin):
    api = node_api(kube, "cn-a")
    try:
        done = node_steps.cordon_and_taint(api, TAINT_KEY, "maintenance", "m-1", DEADLINE, "aws")
        assert done["condition"] == "NoticeScheduled" and done["condition_patched"] is True
        node = admin.must("GET", "/api/v1/nodes/cn-a")
        first = scheduled(node)
        assert (first["status"], first["reason"], first["message"]) == (
            "True", "Maintenance", f"notice m-1 from aws, deadline {DEADLINE}")
        # The kubelet's Ready (written by the rig, as a kubelet would) survived the merge.
        ready = conditions.condition_of(node, "Ready")
        assert ready is not None and (ready["status"], ready["reason"]) == ("True", "KubeletReady")
        # A reclaim takes over: the condition names it, and stays True since the first write.
        node_steps.cordon_and_taint(api, TAINT_KEY, "reclaim", "r-1", DEADLINE, "relay")
        node = admin.must("GET", "/api/v1/nodes/cn-a")
        now = scheduled(node)
        assert (now["status"], now["reason"], now["message"]) == ("True", "Reclaim", f"notice r-1 from relay, deadline {DEADLINE}")
        assert now["lastTransitionTime"] == first["lastTransitionTime"]
        assert node["metadata"]["annotations"][A_NOTICE] == "r-1"
        # The last notice withdrawn: False, Withdrawn; the cordon undone; Ready still there.
        done = node_steps.withdraw(api, TAINT_KEY, "r-1")
        assert done["condition_withdrawn"] is True
        node = admin.must("GET", "/api/v1/nodes/cn-a")
        gone = scheduled(node)
        assert (gone["status"], gone["reason"]) == ("False", "Withdrawn")
        assert conditions.condition_of(node, "Ready") == ready
        assert not node["spec"].get("unschedulable")
    finally:
        api.close()
    # Every status write went as the node itself, on nodes/status.
    writes = audited(kube, "patch", "nodes", "status")
    assert {e["user"]["username"] for e in writes if e["objectRef"]["name"] == "cn-a"} == {"system:node:cn-a"}


def test_another_nodes_status_is_refused_for_the_node_identity(kube, admin):
    confused = node_api(kube, "cn-b", as_node="cn-c")   # node name cn-b, cn-c's credentials
    try:
        with pytest.raises(KubeError) as refused:
            node_steps.cordon_and_taint(confused, TAINT_KEY, "reclaim", "r-2", DEADLINE, "aws")
        assert refused.value.status == 403 and 'is not allowed to modify node "cn-b"' in refused.value.message
        # And the status write alone, as the condition's own call makes it:
        done = node_steps.set_scheduled(confused, "reclaim", "r-2", "aws", DEADLINE)
        assert done["condition_patched"] is False and 'not allowed to modify node "cn-b"' in done["condition_refused"]
    finally:
        confused.close()
    assert conditions.condition_of(admin.must("GET", "/api/v1/nodes/cn-b"), conditions.NOTICE_SCHEDULED) is None


def test_the_node_may_mark_its_own_pods_only(kube, admin, ns):
    own = create_running_pod(admin, ns, "own", "cn-c")
    theirs = create_running_pod(admin, ns, "theirs", "cn-b")
    api = node_api(kube, "cn-c")
    try:
        assert node_steps.mark_disruption_target(api, own, "deleted by sco-agent (test)") == ""
        pod = admin.must("GET", f"/api/v1/namespaces/{ns}/pods/own")
        mark = conditions.condition_of(pod, "DisruptionTarget")
        assert mark is not None and (mark["status"], mark["reason"]) == ("True", "TerminationByNodeAgent")
        assert conditions.condition_of(pod, "Ready") is not None   # merged by type, not replaced
        # A misconfigured agent (node name cn-b, cn-c's credentials) passes its own check; the server refuses.
        confused = node_api(kube, "cn-b", as_node="cn-c")
        try:
            why = node_steps.mark_disruption_target(confused, theirs, "x")
        finally:
            confused.close()
        assert "403" in why and "can only update pod status for pods with spec.nodeName set to itself" in why
        assert conditions.condition_of(admin.must("GET", f"/api/v1/namespaces/{ns}/pods/theirs"),
                                       "DisruptionTarget") is None
        # The UID pins the patch: a pod recreated under the name is not marked by an old decision.
        stale = {**own, "metadata": {**own["metadata"], "uid": str(uuid.uuid4())}, "status": {}}
        assert node_steps.mark_disruption_target(api, stale, "x") != ""
    finally:
        api.close()


def test_a_pod_the_agent_deletes_is_marked_first(kube, admin, ns, drains):
    node = "cn-c"
    create_running_pod(admin, ns, "db-0", node, labels={"app": "db"})
    create_pdb(admin, ns, "db", {"app": "db"}, min_available=1)
    with FakeControlPlane(kube.client, nodes=[node]):
        d = Drain(lambda: node_api(kube, node), make_spec(evict_s=1.5, deadline_in=20.0, margin_s=5.0,
                                                          pdb_blocked="delete"))
        drains.append(d)
        d.wait_state("done", timeout=40)
    assert [e["pod"] for e in d.events("drain.deleted")] == [f"{ns}/db-0"]
    assert d.events("drain.disruption_target_failed") == []
    marks = [e for e in audited(kube, "patch", "pods", "status") if e["objectRef"].get("namespace") == ns
             and e["objectRef"]["name"] == "db-0"]
    deletes = [e for e in audited(kube, "delete", "pods") if e["objectRef"].get("namespace") == ns
               and e["objectRef"]["name"] == "db-0" and e["user"]["username"] == f"system:node:{node}"]
    assert marks and deletes and marks[0]["responseStatus"]["code"] == 200
    (cond,) = marks[0]["requestObject"]["status"]["conditions"]
    assert (cond["type"], cond["reason"]) == ("DisruptionTarget", "TerminationByNodeAgent")
    assert marks[0]["user"]["username"] == f"system:node:{node}"
    assert marks[0]["stageTimestamp"] <= deletes[0]["requestReceivedTimestamp"]


# -- the emulator against the real server -----------------------------------------------------------

CASES = [   # (what, as node, method, path, body)
    ("own status", "cn-a", "PATCH", "/api/v1/nodes/cn-a/status",
     {"status": {"conditions": [{"type": "NoticeScheduled", "status": "True", "reason": "Reclaim", "message": "m"}]}}),
    ("another node's status", "cn-a", "PATCH", "/api/v1/nodes/cn-b/status",
     {"status": {"conditions": [{"type": "NoticeScheduled", "status": "True", "reason": "Reclaim", "message": "m"}]}}),
    ("another node", "cn-a", "PATCH", "/api/v1/nodes/cn-b", {"spec": {"unschedulable": True}}),
    ("its own taints", "cn-a", "PATCH", "/api/v1/nodes/cn-a",
     {"spec": {"taints": [{"key": "sco.io/notice", "value": "reclaim", "effect": "NoSchedule"}]}}),
    ("its own pod's status", "cn-a", "PATCH", "/api/v1/namespaces/{ns}/pods/on-a/status",
     {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByNodeAgent"}]}}),
    ("another node's pod's status", "cn-a", "PATCH", "/api/v1/namespaces/{ns}/pods/on-b/status",
     {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByNodeAgent"}]}}),
    ("evicting another node's pod", "cn-a", "POST", "/api/v1/namespaces/{ns}/pods/on-b/eviction",
     {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "on-b", "namespace": "{ns}"}}),
    ("deleting another node's pod", "cn-a", "DELETE", "/api/v1/namespaces/{ns}/pods/on-b", None),
]


def _fill(value: Any, ns: str) -> Any:
    if isinstance(value, str):
        return value.replace("{ns}", ns)
    if isinstance(value, dict):
        return {k: _fill(v, ns) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ns) for v in value]
    return value


def _summary(code: int, doc: Any, path: str) -> tuple[int, str, list[str]]:
    """What must match: the code, the refusal's message, and for an answered status write the
    condition types the object now carries (the kubelet's Ready kept, ours merged in; the rigs'
    stand-in kubelets write different others)."""
    doc = doc if isinstance(doc, dict) else {}
    kinds = sorted({c.get("type", "") for c in (doc.get("status") or {}).get("conditions") or []}
                   & {"Ready", "NoticeScheduled", "DisruptionTarget"}) if code == 200 and path.endswith("/status") else []
    return code, str(doc.get("message", "")) if code >= 400 else "", kinds


def test_the_emulator_answers_the_node_identity_as_the_real_server(kube, admin, tmp_path):
    ns = f"cmp-{uuid.uuid4().hex[:6]}"
    ensure_namespace(admin, ns)
    create_running_pod(admin, ns, "on-a", "cn-a")
    create_running_pod(admin, ns, "on-b", "cn-b")
    tokens = {f"tok-{n}": f"system:node:{n}" for n in NODES} | {"tok-admin": "admin"}
    with kube_emulator(tmp_path / "emu", tokens=tokens, token="tok-admin", policy_versions=("v1beta1",)) as emu:
        for n in NODES:
            emu.add_node(n)
        emu.add_pod("on-a", "cn-a", namespace=ns)
        emu.add_pod("on-b", "cn-b", namespace=ns)
        emu.wait_for(lambda: all((p.get("status") or {}).get("phase") == "Running" for p in emu.pods()))
        real_answers, emu_answers = [], []
        for what, as_node, method, raw_path, raw_body in CASES:
            path, body = _fill(raw_path, ns), _fill(raw_body, ns)
            ctype = "application/json" if method == "POST" else "application/strategic-merge-patch+json"
            client = KubeClient(kube.url, kube.nodes[as_node].token, kube.ca_file)
            try:
                resp = client.request(method, path, body, content_type=ctype)
                real_answers.append((what, _summary(resp.status_code, resp.json(), path)))
            finally:
                client.close()
            code, doc = emu.request(method, path, body, ctype, headers={"Authorization": f"Bearer tok-{as_node}"})
            emu_answers.append((what, _summary(code, doc, path)))
    assert emu_answers == real_answers
    assert [a[1][0] for a in real_answers] == [200, 403, 403, 403, 200, 403, 403, 403]


def test_the_taint_credential_may_write_no_status(kube, admin, ns):
    """deploy/kubernetes/rbac.yaml grants the sco-agent service account no status subresource: the
    conditions go as the node only (RBAC refuses the account, before any admission policy)."""
    create_running_pod(admin, ns, "sa-probe", "cn-a")
    client = KubeClient(kube.url, sa_token(kube), kube.ca_file)
    smp = "application/strategic-merge-patch+json"
    body = {"status": {"conditions": [{"type": "NoticeScheduled", "status": "True", "reason": "Reclaim"}]}}
    try:
        for path in ("/api/v1/nodes/cn-a/status", f"/api/v1/namespaces/{ns}/pods/sa-probe/status"):
            resp = client.request("PATCH", path, body, content_type=smp)
            assert resp.status_code == 403 and "system:serviceaccount:sco-system:sco-agent" in resp.json()["message"]
    finally:
        client.close()
