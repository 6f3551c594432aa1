"""Unit tests of the emulator's pure cores: patches, selectors, PDB status, eviction decisions."""
from __future__ import annotations

import pytest

from tests.emulators.kube import objects as o
from tests.emulators.kube.errors import ApiError
from tests.emulators.kube.patching import (
    PatchError,
    json_equal,
    json_patch,
    merge_patch,
    strategic_merge,
)
from tests.emulators.kube.policy import compute_status, plan_eviction
from tests.emulators.kube.protobuf import decode
from tests.emulators.kube.resources import PODS
from tests.emulators.kube.selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from tests.emulators.kube.table import human_duration

NOW = 1_800_000_000.0
NODE = {"metadata": {"name": "n1", "labels": {"a": "1"}},
        "spec": {"taints": [{"key": "old", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]}}


def _pod(name: str, labels: dict[str, str], phase: str = "Running", ready: bool = True,
         terminating: bool = False) -> dict:
    pod = o.pod(name, "n1", labels=labels, phase=phase)
    pod["metadata"]["uid"] = f"uid-{name}"
    if phase == "Running" and not ready:
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    return pod


def _pdb(**spec: object) -> dict:
    pdb = o.pdb("budget", {"app": "db"}, **spec)  # type: ignore[arg-type]
    pdb["metadata"]["generation"] = 1
    return pdb


# ----- strategic merge patch -----
def test_smp_replaces_the_taint_list_whole() -> None:
    """NodeSpec.Taints has no patch strategy: the patch's list is the new list."""
    out = strategic_merge(NODE, {"spec": {"taints": [{"key": "new", "effect": "NoExecute"}]}})
    assert out["spec"]["taints"] == [{"key": "new", "effect": "NoExecute"}]


def test_smp_merges_labels_and_null_deletes() -> None:
    out = strategic_merge(NODE, {"metadata": {"labels": {"b": "2", "a": None}}})
    assert out["metadata"]["labels"] == {"b": "2"}


def test_smp_merges_conditions_by_type() -> None:
    out = strategic_merge(NODE, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False"},
                                           {"type": "DiskPressure", "status": "False"}]


def test_smp_directives_delete_and_replace() -> None:
    out = strategic_merge(NODE, {"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]},
                                 "spec": {"$patch": "replace", "unschedulable": True}})
    assert out["status"]["conditions"] == [{"type": "DiskPressure", "status": "False"}]
    assert out["spec"] == {"unschedulable": True}


def test_smp_ignores_set_element_order_and_merges_finalizers() -> None:
    out = strategic_merge({"metadata": {"finalizers": ["a"]}},
                          {"metadata": {"finalizers": ["b"], "$setElementOrder/finalizers": ["a", "b"]}})
    assert out == {"metadata": {"finalizers": ["a", "b"]}}


def test_merge_patch_replaces_lists_and_deletes_nulls() -> None:
    out = merge_patch(NODE, {"spec": {"taints": []}, "metadata": {"labels": None}})
    assert out["spec"]["taints"] == [] and "labels" not in out["metadata"]


# ----- JSON patch -----
def test_json_patch_ops() -> None:
    doc = {"a": [1, 2], "b": {"c": "x/y"}}
    out = json_patch(doc, [{"op": "add", "path": "/a/-", "value": 3}, {"op": "remove", "path": "/a/0"},
                           {"op": "replace", "path": "/b/c", "value": "z"}, {"op": "copy", "from": "/b", "path": "/d"},
                           {"op": "move", "from": "/d/c", "path": "/e"}, {"op": "test", "path": "/e", "value": "z"}])
    assert out == {"a": [2, 3], "b": {"c": "z"}, "d": {}, "e": "z"}
    assert doc == {"a": [1, 2], "b": {"c": "x/y"}}


@pytest.mark.parametrize("ops", [
    [{"op": "test", "path": "/spec/unschedulable", "value": True}],
    [{"op": "remove", "path": "/spec/nothing"}],
    [{"op": "replace", "path": "/metadata/missing", "value": 1}],
    [{"op": "test", "path": "/metadata/labels/a", "value": 1}],  # "1" is not 1
])
def test_json_patch_failures_raise(ops: list) -> None:
    with pytest.raises(PatchError) as err:
        json_patch(NODE, ops)
    assert not err.value.bad_request


def test_json_equal_distinguishes_bool_from_int() -> None:
    assert json_equal(1, 1.0) and not json_equal(True, 1) and not json_equal({"a": 1}, {"a": True})


# ----- selectors -----
@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("app=web", {"app": "web"}, True),
    ("app==web,tier!=db", {"app": "web"}, True),
    ("tier!=db", {"tier": "db"}, False),
    ("app in (web, api)", {"app": "api"}, True),
    ("app notin (web)", {}, True),
    ("app", {"app": ""}, True),
    ("!app", {"app": "x"}, False),
    ("n>3", {"n": "4"}, True),
    ("", {}, True),
])
def test_label_selectors(text: str, labels: dict, expected: bool) -> None:
    assert labels_match(labels, parse_label_selector(text)) is expected


@pytest.mark.parametrize("text", ["app in ()", "a b", "=x", "n>x"])
def test_bad_label_selectors(text: str) -> None:
    with pytest.raises(ValueError, match="unable to parse"):
        parse_label_selector(text)


def test_field_selectors_on_missing_and_bool_fields() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {}, "status": {"phase": "Running"}}
    assert fields_match(pod, parse_field_selector("spec.nodeName=", PODS.field_labels))
    assert fields_match(pod, parse_field_selector("status.phase!=Failed,metadata.name=p", PODS.field_labels))
    with pytest.raises(ValueError, match=r"field label not supported: spec\.foo"):
        parse_field_selector("spec.foo=x", PODS.field_labels)


# ----- disruption controller -----
@pytest.mark.parametrize(("spec", "desired", "allowed"), [
    ({"min_available": 2}, 2, 1),
    ({"min_available": "50%"}, 2, 1),  # ceil(50% of 4)
    ({"max_unavailable": 1}, 3, 0),
    ({"max_unavailable": "30%"}, 2, 1),  # 4 - ceil(1.2)
    ({"max_unavailable": 0}, 4, 0),
])
def test_pdb_status_counts_healthy_matching_pods(spec: dict, desired: int, allowed: int) -> None:
    """4 matching pods, 3 healthy (one not ready), plus a terminating one and an unrelated one."""
    pods = [_pod("a", {"app": "db"}), _pod("b", {"app": "db"}), _pod("c", {"app": "db"}),
            _pod("d", {"app": "db"}, ready=False), _pod("x", {"app": "web"})]
    status = compute_status(_pdb(**spec), pods, NOW)
    assert (status["expectedPods"], status["currentHealthy"]) == (4, 3)
    assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (desired, allowed)
    assert status["observedGeneration"] == 1


def test_pdb_status_excludes_recently_disrupted_pods() -> None:
    pdb = _pdb(min_available=1)
    pdb["status"] = {"disruptedPods": {"a": "2027-01-15T08:00:00Z", "b": "2020-01-01T00:00:00Z"}}
    status = compute_status(pdb, [_pod("a", {"app": "db"}), _pod("b", {"app": "db"})], 1_800_000_000.0)
    assert status["currentHealthy"] == 1 and status["disruptedPods"] == {"a": "2027-01-15T08:00:00Z"}


# ----- eviction decisions -----
def _with_status(pdb: dict, **status: int) -> dict:
    pdb["status"] = {"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 2, **status}
    return pdb


def test_eviction_decrements_and_records_disrupted_pod() -> None:
    plan = plan_eviction(_pod("a", {"app": "db"}), [_with_status(_pdb(min_available=1), disruptionsAllowed=1)], NOW)
    assert plan.pdb_name == "budget"
    assert plan.pdb_status and plan.pdb_status["disruptionsAllowed"] == 0 and "a" in plan.pdb_status["disruptedPods"]


def test_eviction_refused_with_disruption_budget_cause() -> None:
    with pytest.raises(ApiError) as err:
        plan_eviction(_pod("a", {"app": "db"}), [_with_status(_pdb(min_available=2), disruptionsAllowed=0)], NOW)
    assert err.value.code == 429
    assert err.value.status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert err.value.status["details"] == {"causes": [{
        "reason": "DisruptionBudget", "message": "The disruption budget budget needs 2 healthy pods and has 2 currently"}]}
    assert not err.value.headers


def test_eviction_of_unobserved_pdb_is_still_being_processed() -> None:
    pdb = _with_status(_pdb(min_available=1), disruptionsAllowed=5)
    pdb["metadata"]["generation"] = 2
    with pytest.raises(ApiError) as err:
        plan_eviction(_pod("a", {"app": "db"}), [pdb], NOW)
    assert err.value.code == 429 and err.value.headers == {"Retry-After": "10"}
    assert "still being processed" in err.value.status["details"]["causes"][0]["message"]


def test_eviction_with_two_pdbs_is_a_500() -> None:
    second = _with_status(_pdb(min_available=1), disruptionsAllowed=1)
    second["metadata"]["name"] = "other"
    with pytest.raises(ApiError) as err:
        plan_eviction(_pod("a", {"app": "db"}), [_with_status(_pdb(min_available=1), disruptionsAllowed=1), second], NOW)
    assert err.value.code == 500 and "more than one PodDisruptionBudget" in err.value.status["message"]
    assert "reason" not in err.value.status


@pytest.mark.parametrize("pod", [
    _pod("a", {"app": "db"}, phase="Pending"), _pod("a", {"app": "db"}, phase="Succeeded"),
    _pod("a", {"app": "db"}, terminating=True), _pod("a", {"app": "web"}),
])
def test_eviction_ignores_pdb_for_pending_finished_terminating_or_uncovered_pods(pod: dict) -> None:
    plan = plan_eviction(pod, [_with_status(_pdb(min_available=5), disruptionsAllowed=0)], NOW)
    assert plan.pdb_name is None


def test_unready_pod_evicted_without_budget_when_budget_is_healthy() -> None:
    pdb = _with_status(_pdb(min_available=2), disruptionsAllowed=0)
    assert plan_eviction(_pod("a", {"app": "db"}, ready=False), [pdb], NOW).pdb_name is None


def test_empty_pdb_selector_matches_nothing() -> None:
    pdb = _with_status(_pdb(min_available=5), disruptionsAllowed=0)
    pdb["spec"]["selector"] = {}
    assert plan_eviction(_pod("a", {"app": "db"}), [pdb], NOW).pdb_name is None


@pytest.mark.parametrize(("seconds", "text"), [
    (5, "5s"), (119, "119s"), (150, "2m30s"), (600, "10m"), (3 * 3600 + 60, "3h1m"), (30 * 3600, "30h"),
    (3 * 86400 + 3600, "3d1h"), (-5, "<invalid>"),
])
def test_human_duration_matches_kubectl(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


# ----- protobuf bodies from kubectl's typed clients -----
def _ld(field: int, payload: bytes) -> bytes:
    return bytes([field << 3 | 2, len(payload)]) + payload


def test_protobuf_namespace_as_sent_by_kubectl_create_namespace() -> None:
    captured = (b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x1e\n\x16\n\x06team-a\x12\x00\x1a\x00\"\x00*\x002"
                b"\x008\x00B\x00\x12\x00\x1a\x02\n\x00\x1a\x00\"\x00")
    assert decode(captured) == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}


def test_protobuf_delete_options() -> None:
    raw = b"\x08\x05" + _ld(2, _ld(1, b"u1")) + _ld(4, b"Background") + _ld(5, b"All")
    body = b"k8s\x00" + _ld(1, _ld(1, b"v1") + _ld(2, b"DeleteOptions")) + _ld(2, raw)
    assert decode(body) == {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 5,
                            "preconditions": {"uid": "u1"}, "propagationPolicy": "Background", "dryRun": ["All"]}


@pytest.mark.parametrize("body", [b"{}", b"k8s\x00" + _ld(1, _ld(2, b"Pod")), b"k8s\x00\x12\x7f"])
def test_protobuf_refuses_what_it_cannot_decode(body: bytes) -> None:
    with pytest.raises(ValueError):
        decode(body)
