"""The fake disruption controller's and kubelet's decisions, without a server."""
from __future__ import annotations

from typing import Any

from tests.rigs.kube_real_objects import pdb_status, pods_to_finish


def pod(name: str, *, labels: dict[str, str] | None = None, phase: str = "Running", ready: bool = True,
        deleting: bool = False, node: str = "n1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pdb(spec: dict[str, Any], status: dict[str, Any] | None = None, generation: int = 3) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "generation": generation},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}, "status": status or {}}


WEB = {"app": "web"}


def test_min_available_counts_only_running_ready_undeleted_matching_pods() -> None:
    """Healthy = Running, Ready, not deleting; unmatched pods are ignored; generation observed."""
    pods = [pod("a", labels=WEB), pod("b", labels=WEB, ready=False), pod("c", labels=WEB, deleting=True),
            pod("d", labels=WEB, phase="Pending"), pod("e", labels={"app": "db"}), pod("f", labels=WEB)]
    assert pdb_status(pdb({"minAvailable": 1}), pods) == {
        "observedGeneration": 3, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 5,
        "disruptionsAllowed": 1,
    }


def test_disrupted_pod_is_unhealthy_until_its_deletion_is_seen() -> None:
    """An evicted pod not yet marked deleting stays in disruptedPods and does not count as healthy."""
    pods = [pod("a", labels=WEB), pod("b", labels=WEB), pod("c", labels=WEB, deleting=True)]
    old = {"disruptedPods": {"a": "2026-11-29T00:00:00Z", "c": "2026-11-29T00:00:00Z", "gone": "x"}}
    status = pdb_status(pdb({"minAvailable": 1}, old), pods)
    assert status["disruptedPods"] == {"a": "2026-11-29T00:00:00Z"}
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (1, 0)


def test_max_unavailable_and_percentages_round_up() -> None:
    """maxUnavailable 50% of 3 rounds up to 2 unavailable, so 1 must stay healthy."""
    pods = [pod(n, labels=WEB) for n in "abc"]
    assert pdb_status(pdb({"maxUnavailable": "50%"}), pods)["desiredHealthy"] == 1
    assert pdb_status(pdb({"minAvailable": "50%"}), pods)["desiredHealthy"] == 2


def test_empty_selector_matches_nothing() -> None:
    pods = [pod("a", labels=WEB)]
    empty = {"metadata": {"name": "p", "generation": 1}, "spec": {"selector": {}, "minAvailable": 1}}
    assert pdb_status(empty, pods)["expectedPods"] == 0


def test_kubelet_finishes_only_terminating_pods_on_its_nodes() -> None:
    pods = [pod("a", deleting=True), pod("b"), pod("c", deleting=True, node="n2")]
    assert [p["metadata"]["name"] for p in pods_to_finish(pods, frozenset({"n1"}))] == ["a"]
    assert [p["metadata"]["name"] for p in pods_to_finish(pods)] == ["a", "c"]
