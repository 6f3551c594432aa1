"""The verdict names each pod the drain touched, with what became of it and when, so an owner
can tell which of its jobs to restart (issue 28, point 8; aws-node-termination-handler #359).
The whole agent under a real supervisord and the emulated API server."""
from __future__ import annotations

from tests.support.stack import NODE, Stack

BUDGET = {"budget_s": 30, "checkpoint_s": 2, "evict_s": 15, "margin_s": 5}


def test_a_rebalance_verdict_lists_the_evicted_and_the_skipped_pods_each_with_its_time(tmp_path):
    with Stack(str(tmp_path), contract=BUDGET, contract_extra={"kinds": {"rebalance": "drain"}}) as s:
        s.kube.add_pod("web-1", NODE, owner=("ReplicaSet", "web"))
        s.kube.add_pod("web-2", NODE, owner=("ReplicaSet", "web"))
        s.kube.add_pod("keep", NODE, owner=("ReplicaSet", "keep"), annotations={"sco.io/drain": "skip"})
        doc = s.publish_notice(kind="rebalance", deadline_in=60)
        verdict = s.wait_event("drain.done", doc["id"], timeout=40)["data"]
        pods = {p["pod"]: p for p in verdict["pods"]}
        assert {k: p["outcome"] for k, p in pods.items()} == {
            "default/web-1": "evicted", "default/web-2": "evicted", "default/keep": "skipped"}
        assert verdict["pods_count"] == 3 and verdict["pods_truncated"] == 0
        # Each time is the one the executor's own event about that pod carries.
        for e in s.events_of("drain.evicted", doc["id"]) + s.events_of("drain.pod_skipped", doc["id"]):
            assert pods[e["data"]["pod"]]["at"] == e["ts"]


def test_an_overrun_verdict_names_the_pod_still_there_and_why_it_was_held(tmp_path):
    with Stack(str(tmp_path), contract={"budget_s": 12, "checkpoint_s": 2, "evict_s": 6, "margin_s": 3}) as s:
        s.kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
        s.kube.add_pod("db-0", NODE, labels={"app": "db"}, owner=("StatefulSet", "db"))
        s.kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
        doc = s.publish_notice(kind="reclaim", deadline_in=15)
        verdict = s.wait_event("drain.overrun", doc["id"], timeout=40)["data"]
        pods = {p["pod"]: p for p in verdict["pods"]}
        assert pods["default/web"]["outcome"] == "evicted"
        assert pods["default/db-0"]["outcome"] == "still_there"
        assert pods["default/db-0"]["held"] == "pdb_blocked"
        assert verdict["pods"][0]["pod"] == "default/db-0"   # what an owner must act on comes first


def test_with_two_notices_on_one_drain_each_verdict_lists_the_pods_touched_for_it(tmp_path):
    """Two reclaims at once (one drain serves both, the earlier deadline governing): each verdict
    names the pods, not only the governing notice's."""
    with Stack(str(tmp_path), contract=BUDGET) as s:
        for name in ("web-1", "web-2"):
            s.kube.add_pod(name, NODE, owner=("ReplicaSet", "web"), terminate_after=1)
        first = s.publish_notice(kind="reclaim", deadline_in=40)
        second = s.publish_notice(kind="reclaim", deadline_in=50)
        for doc in (first, second):
            verdict = s.wait_event("drain.done", doc["id"], timeout=40)["data"]
            assert {p["pod"]: p["outcome"] for p in verdict["pods"]} == {
                "default/web-1": "evicted", "default/web-2": "evicted"}, doc["id"]
