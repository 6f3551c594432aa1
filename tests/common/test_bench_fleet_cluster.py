"""bench.fleet_cluster's observer: the control plane's turn-arounds the model replays (issue 27, point 6)."""
from __future__ import annotations

from typing import Any

from bench.fleet_cluster import PodCache, mean_turns


def _pod(uid: str, ns: str = "ns-0", terminating: bool = False) -> dict[str, Any]:
    md: dict[str, Any] = {"uid": uid, "name": uid, "namespace": ns}
    if terminating:
        md["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    return {"metadata": md, "spec": {"nodeName": "n-0"}}


def test_the_kubelet_turn_runs_from_the_deletion_seen_to_the_pod_gone_and_each_namespace_says_since_when():
    cache = PodCache()
    cache.reset([_pod("a"), _pod("b"), _pod("c", "ns-1")])
    cache.apply({"type": "MODIFIED", "object": _pod("a", terminating=True)}, 0.0)
    cache.apply({"type": "MODIFIED", "object": _pod("a", terminating=True)}, 0.0)   # seen once, from the first
    cache.apply({"type": "DELETED", "object": _pod("a")}, 0.0)
    cache.apply({"type": "DELETED", "object": _pod("b")}, 0.0)                      # never seen terminating
    assert cache.kubelet_turns.n == 1 and cache.kubelet_turns.total_s >= 0.0
    since = cache.take_gone_since(["ns-0", "ns-1"])
    assert list(since) == ["ns-0"]                 # ns-1 lost no pod
    assert cache.take_gone_since(["ns-0"]) == {}   # taken: the next PDB write answers a newer loss


def test_a_scenario_s_mean_turns_are_the_difference_of_two_readings():
    assert mean_turns((2, 1.0, 4, 2.0), (6, 3.0, 4, 2.0)) == {"kubelet_s": 0.5, "controller_s": None}
