"""The Kubernetes drain end to end: real supervisord, the emulated API server, the whole agent."""
from __future__ import annotations

import os
import signal
from collections import Counter

from tests.support.stack import NODE, OTHER_NODE, Stack
from tests.support.wait import at_least, wait_for

FOREIGN = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
SMP = "application/strategic-merge-patch+json"


def publish(stack: Stack, **kw):
    # The watcher subscribes to the relay a moment after supervisord calls it RUNNING.
    wait_for(lambda: "relay.connected" in stack.agent.log("watcher"), 20, "the watcher on the relay")
    return stack.publish_notice(**kw)


def test_drain_keeps_foreign_taints_skips_daemonsets_and_mirrors_and_reports_a_blocked_pdb(tmp_path):
    with Stack(str(tmp_path)) as s:
        code, _ = s.kube.request("PATCH", f"/api/v1/nodes/{NODE}", {"spec": {"taints": [FOREIGN]}}, SMP)
        assert code == 200
        for name in ("app-1", "app-2"):
            s.kube.add_pod(name, NODE, owner=("ReplicaSet", "app"))
        s.kube.add_daemonset("agent")
        s.kube.add_pod("agent-a", NODE, namespace="kube-system", owner=("DaemonSet", "agent"))
        s.kube.add_pod("static-a", NODE, mirror=True)
        s.kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
        s.kube.add_pod("db-0", NODE, labels={"app": "db"})
        # The built-in contract: 25 s budget, 5 s margin; with 12 s left the evict cutoff is at 7 s.
        doc = publish(s, deadline_in=12)
        blocked = s.wait_event("drain.eviction_blocked", doc["id"], timeout=25)
        assert blocked["data"]["pod"] == "default/db-0" and blocked["data"]["pdb"] == "default/db"
        evicted = sorted(e["data"]["pod"] for e in wait_for(
            at_least(2, lambda: s.events_of("drain.evicted", doc["id"])), 15, "two drain.evicted events"))
        assert evicted == ["default/app-1", "default/app-2"]
        # db-0's budget shows no room: past the cutoff it is reported, and sent only once the
        # watched status has stood still (executor/kube/pdb_share.py), so it may or may not be asked.
        assert {"app-1", "app-2"} <= {n for _, n, _ in s.kube.evictions()} <= {"app-1", "app-2", "db-0"}
        assert {"agent-a", "static-a", "db-0"} <= s.kube.pod_names(NODE)
        taints = s.node()["spec"]["taints"]
        assert taints == [FOREIGN, {"key": "sco.io/notice", "value": "reclaim", "effect": "NoSchedule"}]
        verdict = s.wait_event("drain.overrun", doc["id"], timeout=15)
        assert verdict["data"]["left"] == ["default/db-0"]
        assert not s.cordoned(OTHER_NODE)


def test_api_server_unreachable_falls_back_then_reconciles(tmp_path):
    marker = tmp_path / "kubelet-shutdown-triggered"
    settings = {"kubernetes": {"fallback_command": ["touch", str(marker)], "timeout_s": 1.0}}
    with Stack(str(tmp_path / "stack"), settings=settings) as s:
        s.kube.add_pod("app", NODE)
        s.kube.down()
        # The built-in contract: a reclaim falls back 10 s (the kubelet's grace) + 2 s before the deadline.
        doc = publish(s, deadline_in=20)
        fallback = s.wait_event("drain.fallback", doc["id"], timeout=30)
        assert fallback["data"]["ran"] is True and fallback["data"]["exit"] == 0 and marker.exists()
        s.kube.up()
        rec = s.wait_event("drain.reconciled", doc["id"], timeout=20)
        assert rec["data"]["remaining"] == ["default/app"] and rec["data"]["tainted"] is True
        # The server was down before anything was written: the reconcile says why on the node too.
        assert rec["data"]["condition"] == "NoticeScheduled"
        (cond,) = [c for c in s.node()["status"]["conditions"] if c["type"] == "NoticeScheduled"]
        assert cond["status"] == "True" and cond["reason"] == "Reclaim" and doc["id"] in cond["message"]
        s.wait_event("drain.node_empty", doc["id"], timeout=20)
        assert s.cordoned()
        assert len(s.events_of("drain.fallback", doc["id"])) == 1


def test_executor_killed_mid_drain_finishes_it_and_evicts_nothing_twice(tmp_path):
    with Stack(str(tmp_path)) as s:
        for i in range(4):
            s.kube.add_pod(f"slow-{i}", NODE, terminate_after=3)
        s.kube.add_pdb("web", {"app": "web"}, max_unavailable=1)
        for i in range(2):
            s.kube.add_pod(f"web-{i}", NODE, labels={"app": "web"}, owner=("ReplicaSet", "web"),
                           terminate_after=2)
        doc = publish(s, deadline_in=60)
        s.wait_event("drain.evicted", doc["id"])
        old = s.agent.pid("executor")
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: s.agent.status()["executor"] == ("RUNNING", s.agent.pid("executor"))
                 and s.agent.pid("executor") != old, 30, "the executor restarted")
        s.wait_event("drain.node_empty", doc["id"], timeout=25)
        accepted = Counter(name for _, name, status in s.kube.evictions() if status == 201)
        assert sorted(accepted) == ["slow-0", "slow-1", "slow-2", "slow-3", "web-0", "web-1"]
        assert set(accepted.values()) == {1}
        spooled = Counter(e["data"]["uid"] for e in s.events_of("drain.evicted", doc["id"]))
        assert set(spooled.values()) == {1}
        assert s.wait_event("drain.done", doc["id"], timeout=15)
