"""The emulator's REST semantics over real HTTP, against an in-process server."""
from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.emulators.kube import KubeApiServer, Options
from tests.emulators.kube import objects as o
from tests.procutil import wait_for

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSONPATCH = "application/json-patch+json"
RS = o.owner_ref("ReplicaSet", "web-5d8f")


class Client:
    """Raw HTTP against the emulator; one keep-alive connection."""

    def __init__(self, server: KubeApiServer) -> None:
        self.server = server
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)

    def call(self, method: str, path: str, body: Any = None, ctype: str = "application/json",
             headers: dict[str, str] | None = None) -> tuple[int, Any, http.client.HTTPResponse]:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.conn.request(method, path, body=data, headers={"Content-Type": ctype, **(headers or {})})
        resp = self.conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw) if raw else None, resp
        except ValueError:
            return resp.status, raw.decode(), resp

    def ok(self, method: str, path: str, body: Any = None, ctype: str = "application/json") -> Any:
        code, doc, _ = self.call(method, path, body, ctype)
        assert code in (200, 201), (code, doc)
        return doc


@pytest.fixture(scope="module")
def server() -> Iterator[KubeApiServer]:
    # The test steps the simulated kubelet itself (see _wait), so nothing races it.
    with KubeApiServer(options=Options(grace_cap=0.05), run_controllers=False) as srv:
        yield srv


@pytest.fixture
def api(server: KubeApiServer) -> Iterator[Client]:
    server.reset()
    server.app.seed([o.node("n1"), o.node("n2"), o.node("n3", unschedulable=True)])
    client = Client(server)
    yield client
    client.conn.close()


def _wait(server: KubeApiServer, probe: Any, timeout: float = 10.0) -> Any:
    """Drive the simulated controllers one round per poll until ``probe()`` holds."""
    def step() -> Any:
        value = probe()
        if not value:
            server.controllers.run_once()
        return value

    return wait_for(step, timeout, "the controllers to get there", interval=0.01, retry_on=())


# ----- discovery -----
def test_discovery_advertises_eviction_as_kubectl_expects(api: Client) -> None:
    resources = api.ok("GET", "/api/v1")["resources"]
    assert {"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
            "version": "v1", "kind": "Eviction", "verbs": ["create"]} in resources
    groups = {g["name"]: g for g in api.ok("GET", "/apis")["groups"]}
    assert groups["policy"]["preferredVersion"] == {"groupVersion": "policy/v1", "version": "v1"}
    assert api.call("GET", "/apis/policy/v1beta1")[0] == 404


def test_a_1_20_server_serves_policy_v1beta1_only() -> None:
    with KubeApiServer(options=Options(policy_versions=("v1beta1",), server_version="v1.20.2")) as srv:
        api = Client(srv)
        entry = next(r for r in api.ok("GET", "/api/v1")["resources"] if r["name"] == "pods/eviction")
        assert entry["version"] == "v1beta1"
        assert api.call("GET", "/apis/policy/v1")[0] == 404
        assert api.ok("GET", "/version")["gitVersion"] == "v1.20.2"
        srv.app.seed([o.node("n1"), o.pod("p", "n1")])
        code, doc, _ = api.call("POST", "/api/v1/namespaces/default/pods/p/eviction",
                                {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}})
        assert code == 400, doc
        body = {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "p"}}
        assert api.call("POST", "/api/v1/namespaces/default/pods/p/eviction", body)[0] == 201


# ----- lists, selectors, pagination -----
def test_list_shape_and_field_selectors(api: Client) -> None:
    api.server.set_options(replicasets=False)  # keep the unbound pod unscheduled
    api.server.app.seed([o.pod("a", "n1"), o.pod("b", "n2"), o.pod("c", None, phase=None, namespace="kube-system")])
    doc = api.ok("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1")
    assert doc["kind"] == "PodList" and doc["apiVersion"] == "v1" and doc["metadata"]["resourceVersion"]
    assert [p["metadata"]["name"] for p in doc["items"]] == ["a"]
    assert "kind" not in doc["items"][0]  # list items carry no kind/apiVersion, as on a real server
    names = [p["metadata"]["name"] for p in api.ok("GET", "/api/v1/pods?fieldSelector=metadata.namespace%3Ddefault,"
                                                          "status.phase%3DRunning")["items"]]
    assert names == ["a", "b"]


def test_unsupported_field_selector_is_400(api: Client) -> None:
    code, doc, _ = api.call("GET", "/api/v1/pods?fieldSelector=spec.foo%3Dx")
    assert code == 400
    assert doc["reason"] == "BadRequest" and doc["message"] == "field label not supported: spec.foo"


def test_label_selector_set_based(api: Client) -> None:
    api.server.app.seed([o.pod("a", "n1", labels={"app": "web"}), o.pod("b", "n1", labels={"app": "db"}),
                         o.pod("c", "n1")])
    names = lambda q: [p["metadata"]["name"] for p in api.ok("GET", f"/api/v1/pods?labelSelector={q}")["items"]]
    assert names("app%20in%20(web,db)") == ["a", "b"]
    assert names("app%20notin%20(web)") == ["b", "c"]
    assert names("!app") == ["c"]
    assert api.call("GET", "/api/v1/pods?labelSelector=app%20in%20()")[0] == 400


def test_pagination_with_continue(api: Client) -> None:
    api.server.app.seed([o.pod(f"p{i}", "n1") for i in range(7)])
    first = api.ok("GET", "/api/v1/namespaces/default/pods?limit=3")
    assert [p["metadata"]["name"] for p in first["items"]] == ["p0", "p1", "p2"]
    assert first["metadata"]["remainingItemCount"] == 4
    token = first["metadata"]["continue"]
    second = api.ok("GET", f"/api/v1/namespaces/default/pods?limit=3&continue={token}")
    third = api.ok("GET", f"/api/v1/namespaces/default/pods?limit=3&continue={second['metadata']['continue']}")
    assert [p["metadata"]["name"] for p in second["items"] + third["items"]] == ["p3", "p4", "p5", "p6"]
    assert "continue" not in third["metadata"]
    assert first["metadata"]["resourceVersion"] == third["metadata"]["resourceVersion"]
    assert api.call("GET", "/api/v1/pods?limit=3&continue=garbage")[0] == 400


# ----- 404s -----
@pytest.mark.parametrize("path", ["/api/v1/namespaces/default/pods/nope", "/api/v1/nodes/nope",
                                  "/api/v1/widgets", "/apis/apps/v1/namespaces/default/daemonsets/nope",
                                  "/api/v1/namespaces/default/nodes/n1", "/apis/batch/v1"])
def test_not_found(api: Client, path: str) -> None:
    code, doc, _ = api.call("GET", path)
    assert code == 404 and doc["kind"] == "Status" and doc["reason"] == "NotFound"


def test_not_found_status_names_the_object(api: Client) -> None:
    _, doc, _ = api.call("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/x")
    assert doc["message"] == 'poddisruptionbudgets.policy "x" not found'
    assert doc["details"] == {"name": "x", "group": "policy", "kind": "poddisruptionbudgets"}


def test_404_keeps_the_keep_alive_connection_usable(api: Client) -> None:
    """The body of a refused request is consumed, so the next request parses cleanly."""
    assert api.call("POST", "/api/v1/namespaces/default/widgets", {"x": "y" * 5000})[0] == 404
    assert api.call("GET", "/api/v1/nodes/n1")[0] == 200


def test_create_in_missing_namespace_and_duplicates(api: Client) -> None:
    pod = o.pod("p", "n1")
    code, doc, _ = api.call("POST", "/api/v1/namespaces/ghost/pods", {**pod, "metadata": {"name": "p"}})
    assert code == 404 and doc["message"] == 'namespaces "ghost" not found'
    assert api.call("POST", "/api/v1/namespaces/default/pods", pod)[0] == 201
    code, doc, _ = api.call("POST", "/api/v1/namespaces/default/pods", pod)
    assert code == 409 and doc["reason"] == "AlreadyExists"
    code, doc, _ = api.call("POST", "/api/v1/namespaces/default/pods", {"metadata": {"name": "Bad_Name"}})
    assert code == 422 and doc["reason"] == "Invalid"


# ----- PATCH and PUT -----
def test_stale_resource_version_is_409(api: Client) -> None:
    node = api.ok("GET", "/api/v1/nodes/n1")
    rv = node["metadata"]["resourceVersion"]
    api.ok("PATCH", "/api/v1/nodes/n1", {"metadata": {"labels": {"x": "1"}}}, SMP)
    code, doc, _ = api.call("PATCH", "/api/v1/nodes/n1",
                            {"metadata": {"resourceVersion": rv}, "spec": {"unschedulable": True}}, MERGE)
    assert code == 409 and doc["reason"] == "Conflict"
    assert doc["message"].startswith('Operation cannot be fulfilled on nodes "n1": the object has been modified')
    node["spec"]["unschedulable"] = True
    assert api.call("PUT", "/api/v1/nodes/n1", node)[0] == 409
    fresh = api.ok("GET", "/api/v1/nodes/n1")["metadata"]["resourceVersion"]
    done = api.ok("PATCH", "/api/v1/nodes/n1", {"metadata": {"resourceVersion": fresh},
                                                 "spec": {"unschedulable": True}}, MERGE)
    assert done["spec"]["unschedulable"] is True and int(done["metadata"]["resourceVersion"]) > int(fresh)


def test_strategic_merge_replaces_taints_and_merges_labels(api: Client) -> None:
    api.ok("PATCH", "/api/v1/nodes/n1", {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}, SMP)
    out = api.ok("PATCH", "/api/v1/nodes/n1", {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},
                                                 "metadata": {"labels": {"kubernetes.io/os": None, "z": "1"}}}, SMP)
    assert out["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]
    assert out["metadata"]["labels"] == {"kubernetes.io/hostname": "n1", "z": "1"}


def test_unknown_patch_type_is_415(api: Client) -> None:
    for ctype in ("application/apply-patch+yaml", "text/plain", "application/json"):
        code, doc, _ = api.call("PATCH", "/api/v1/nodes/n1", {"spec": {}}, ctype)
        assert code == 415 and doc["reason"] == "UnsupportedMediaType"


def test_json_patch_failing_test_is_422_and_nothing_changes(api: Client) -> None:
    before = api.ok("GET", "/api/v1/nodes/n1")["metadata"]["resourceVersion"]
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
           {"op": "replace", "path": "/spec", "value": {"unschedulable": True}}]
    code, doc, _ = api.call("PATCH", "/api/v1/nodes/n1", ops, JSONPATCH)
    assert code == 422 and doc["reason"] == "Invalid"
    assert api.ok("GET", "/api/v1/nodes/n1")["metadata"]["resourceVersion"] == before
    ops[0]["value"] = before
    assert api.ok("PATCH", "/api/v1/nodes/n1", ops, JSONPATCH)["spec"] == {"unschedulable": True}


def test_noop_patch_keeps_resource_version(api: Client) -> None:
    rv = api.ok("GET", "/api/v1/nodes/n1")["metadata"]["resourceVersion"]
    assert api.ok("PATCH", "/api/v1/nodes/n1", {"metadata": {"labels": {"kubernetes.io/os": "linux"}}},
                  SMP)["metadata"]["resourceVersion"] == rv


def test_status_subresource_and_main_resource_split(api: Client) -> None:
    api.server.app.seed([o.pod("p", "n1")])
    api.ok("PATCH", "/api/v1/namespaces/default/pods/p", {"status": {"phase": "Failed"}, "metadata": {
        "labels": {"x": "1"}}}, MERGE)
    pod = api.ok("GET", "/api/v1/namespaces/default/pods/p")
    assert pod["status"]["phase"] == "Running" and pod["metadata"]["labels"] == {"x": "1"}
    api.ok("PATCH", "/api/v1/namespaces/default/pods/p/status", {"status": {"phase": "Succeeded"}}, MERGE)
    assert api.ok("GET", "/api/v1/namespaces/default/pods/p")["status"]["phase"] == "Succeeded"


# ----- deletion -----
def test_graceful_deletion_then_kubelet_removes(api: Client) -> None:
    api.server.set_options(replicasets=False)
    api.server.app.seed([o.pod("p", "n1", grace=30), o.pod("floating", None, phase=None)])
    deleted = api.ok("DELETE", "/api/v1/namespaces/default/pods/p")
    assert deleted["metadata"]["deletionGracePeriodSeconds"] == 30 and deleted["metadata"]["deletionTimestamp"]
    assert api.call("GET", "/api/v1/namespaces/default/pods/p")[0] == 200
    _wait(api.server, lambda: api.call("GET", "/api/v1/namespaces/default/pods/p")[0] == 404)
    api.ok("DELETE", "/api/v1/namespaces/default/pods/floating")  # unbound: immediate
    assert api.call("GET", "/api/v1/namespaces/default/pods/floating")[0] == 404


def test_pod_that_never_terminates_and_force_delete(api: Client) -> None:
    api.server.app.seed([o.pod("stuck", "n1", terminate_after="never")])
    api.ok("DELETE", "/api/v1/namespaces/default/pods/stuck")
    for _ in range(5):
        api.server.controllers.run_once()
    assert api.call("GET", "/api/v1/namespaces/default/pods/stuck")[0] == 200
    uid = api.ok("GET", "/api/v1/namespaces/default/pods/stuck")["metadata"]["uid"]
    code, doc, _ = api.call("DELETE", "/api/v1/namespaces/default/pods/stuck",
                            {"gracePeriodSeconds": 0, "preconditions": {"uid": "other"}})
    assert code == 409 and "Precondition failed: UID" in doc["message"]
    api.ok("DELETE", "/api/v1/namespaces/default/pods/stuck", {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
    assert api.call("GET", "/api/v1/namespaces/default/pods/stuck")[0] == 404


def test_replicaset_pod_is_replaced_on_a_schedulable_node(api: Client) -> None:
    api.server.app.seed([o.pod("web-1", "n1", labels={"app": "web"}, owner=RS)])
    api.ok("PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": True}}, SMP)
    api.ok("DELETE", "/api/v1/namespaces/default/pods/web-1?gracePeriodSeconds=0")
    pods = _wait(api.server, lambda: [p for p in api.ok("GET", "/api/v1/pods?labelSelector=app%3Dweb")["items"]
                                      if (p.get("status") or {}).get("phase") == "Running"])
    assert len(pods) == 1 and pods[0]["metadata"]["name"].startswith("web-5d8f-")
    assert pods[0]["spec"]["nodeName"] == "n2"  # n1 and n3 are cordoned


# ----- eviction -----
def _evict(api: Client, name: str, body_name: str | None = None, **extra: Any) -> tuple[int, Any]:
    body = {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": body_name or name, "namespace": "default"}, **extra}
    code, doc, _ = api.call("POST", f"/api/v1/namespaces/default/pods/{name}/eviction", body)
    return code, doc


def test_eviction_success_is_201_status(api: Client) -> None:
    api.server.app.seed([o.pod("p", "n1")])
    assert _evict(api, "p") == (201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                      "status": "Success", "code": 201})
    pod = api.ok("GET", "/api/v1/namespaces/default/pods/p")
    assert pod["metadata"]["deletionTimestamp"]
    assert any(c["type"] == "DisruptionTarget" for c in pod["status"]["conditions"])


def test_eviction_errors(api: Client) -> None:
    api.server.app.seed([o.pod("p", "n1")])
    code, doc = _evict(api, "p", body_name="q")
    assert code == 400 and doc["message"] == "name in URL does not match name in Eviction object"
    code, doc = _evict(api, "ghost")
    assert code == 404 and doc["message"] == 'pods "ghost" not found'
    code, _ = _evict(api, "p", deleteOptions={"preconditions": {"uid": "nope"}})
    assert code == 409
    assert api.call("GET", "/api/v1/namespaces/default/pods/p/eviction")[0] == 405


def test_eviction_respects_pdb_and_honours_grace_period(api: Client) -> None:
    api.server.app.seed([o.pod("a", "n1", labels={"app": "db"}), o.pod("b", "n1", labels={"app": "db"}),
                         o.pdb("db", {"app": "db"}, min_available=1)])
    code, _ = _evict(api, "a", deleteOptions={"gracePeriodSeconds": 7})
    assert code == 201
    assert api.ok("GET", "/api/v1/namespaces/default/pods/a")["metadata"]["deletionGracePeriodSeconds"] == 7
    code, doc = _evict(api, "b")
    assert code == 429 and doc["reason"] == "TooManyRequests"
    # The eviction only decremented the budget; healthy counts change when the controller runs.
    cause = "The disruption budget db needs 1 healthy pods and has {} currently"
    assert doc["details"]["causes"] == [{"reason": "DisruptionBudget", "message": cause.format(2)}]
    api.server.controllers.run_once()
    assert _evict(api, "b")[1]["details"]["causes"][0]["message"] == cause.format(1)


def test_eviction_with_frozen_unobserved_pdb_says_still_processing(api: Client) -> None:
    api.server.app.seed([o.pod("a", "n1", labels={"app": "db"}),
                         o.pdb("db", {"app": "db"}, frozen_status={"observedGeneration": 0, "disruptionsAllowed": 3})])
    code, doc, resp = api.call("POST", "/api/v1/namespaces/default/pods/a/eviction", {"metadata": {"name": "a"}})
    assert code == 429 and resp.getheader("Retry-After") == "10"
    assert doc["details"]["causes"][0]["message"] == "The disruption budget db is still being processed by the server."


def test_pdb_status_is_maintained_by_the_disruption_controller(api: Client) -> None:
    api.server.app.seed([o.pod(f"w{i}", "n1", labels={"app": "w"}, owner=RS) for i in range(3)]
                        + [o.pdb("w", {"app": "w"}, max_unavailable=1)])
    status = api.ok("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/w")["status"]
    assert (status["expectedPods"], status["currentHealthy"], status["disruptionsAllowed"]) == (3, 3, 1)
    assert _evict(api, "w0")[0] == 201
    assert _evict(api, "w1")[0] == 429
    # w0 terminates, its replacement starts on n2, and the budget allows one disruption again.
    _wait(api.server, lambda: api.ok("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/w")[
        "status"]["disruptionsAllowed"] == 1)
    assert _evict(api, "w1")[0] == 201


def test_budget_stays_closed_until_the_replacement_is_healthy(api: Client) -> None:
    """Between a pod's removal and its replacement running, a real budget allows nothing."""
    api.server.app.seed([o.pod(f"w{i}", "n1", labels={"app": "w"}, owner=RS) for i in range(3)]
                        + [o.pdb("w", {"app": "w"}, max_unavailable=1)])
    api.server.set_options(start_delay=3600.0)  # replacements stay Pending
    assert _evict(api, "w0")[0] == 201
    # Right after the pass that removed w0 (nothing else has run since):
    _wait(api.server, lambda: api.call("GET", "/api/v1/namespaces/default/pods/w0")[0] == 404)
    status = api.ok("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/w")["status"]
    assert (status["expectedPods"], status["currentHealthy"], status["disruptionsAllowed"]) == (3, 2, 0)
    assert _evict(api, "w1")[0] == 429
