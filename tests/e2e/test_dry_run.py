"""executor.dry_run: every action is logged and recorded, none is taken."""
from __future__ import annotations

import pytest

from tests.support.stack import NODE, Stack
from tests.support.wait import wait_for


@pytest.mark.parametrize("dry_run", [True, False])
def test_dry_run_changes_nothing_on_the_api_server(tmp_path, dry_run):
    """With dry_run the node is never patched and no pod evicted; the control run (off) does both."""
    with Stack(str(tmp_path), settings={"executor": {"dry_run": dry_run}},
               contract={"budget_s": 30, "checkpoint_s": 1, "evict_s": 10, "margin_s": 5}) as s:
        for i in range(3):
            s.kube.add_pod(f"web-{i}", NODE, owner=("ReplicaSet", "web"))
        s.kube.clear_requests()
        doc = s.publish_notice(deadline_in=60)
        if dry_run:
            plan = s.wait_event("drain.plan", doc["id"])["data"]
            assert plan["cordon"] is True and plan["taint"]["key"] == "sco.io/notice"
            assert sorted(p["pod"] for p in plan["pods"]) == ["default/web-0", "default/web-1", "default/web-2"]
            assert {p["phase"] for p in plan["pods"]} == {"evict"} and all(p["grace_s"] > 0 for p in plan["pods"])
            verdict = s.wait_event("drain.dry_run_judged", doc["id"])
            assert verdict["data"]["outcome"] == "dry_run"
            assert len(s.events_of("drain.plan", doc["id"])) == 1
            writes = [r for r in s.kube.requests() if r["method"] in ("PATCH", "POST", "PUT", "DELETE")]
            assert writes == []
            assert not s.cordoned()
            assert s.kube.pod_names(NODE) >= {"web-0", "web-1", "web-2"}
        else:
            wait_for(s.cordoned, 20, "node cordoned")
            wait_for(s.kube.evictions, 20, "evictions")
            assert s.events_of("drain.dry_run") == []
