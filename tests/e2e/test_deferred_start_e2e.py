"""Issue 28, point 2, with the whole agent under supervisord (the API-server emulator, a real
nats-server): when the drain starts, per notice kind.

1. A maintenance notice, on the built-in start (``deadline - budget_s``): the node is cordoned at
   once; no pod is evicted until its start (sampled every 100 ms), ``sco-agentctl status`` says
   when it starts; then ``drain.deferred_started``, the pod is evicted and the verdict is done.
2. A cordon-only maintenance (the contract's ``kinds``): cordoned, never evicts, and its verdict
   says "cordoned" -- not "done", which would claim the node was emptied.
"""
from __future__ import annotations

import subprocess
import sys
import time

from common.timefmt import parse_rfc3339
from tests.support.stack import NODE, Stack
from tests.support.wait import wait_for

# A 10 s budget (a 3 s margin): a maintenance 22 s away starts its drain 12 s after it is heard.
BUDGET = {"budget_s": 10, "checkpoint_s": 2, "evict_s": 5, "margin_s": 3}
START_IN_S = 12.0


def status_text(s: Stack) -> str:
    out = subprocess.run([sys.executable, "-m", "agentctl", "--config", s.agent.config_path, "status"],
                         capture_output=True, text=True, env=s.agent.env, timeout=30, check=False)
    return out.stdout + out.stderr


def test_a_deferred_maintenance_cordons_at_once_evicts_nothing_until_its_start_then_drains(tmp_path):
    with Stack(str(tmp_path), contract=BUDGET) as s:
        s.kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
        maint = s.publish_notice(kind="maintenance", deadline_in=BUDGET["budget_s"] + START_IN_S)
        starts_at = parse_rfc3339(maint["deadline"]) - BUDGET["budget_s"]
        started = s.wait_event("drain.started", maint["id"], timeout=15)
        assert started["data"]["start"] == "deadline_minus_budget"
        assert parse_rfc3339(started["data"]["starts_at"]) == starts_at
        s.wait_event("drain.cordoned", maint["id"], timeout=10)
        assert s.cordoned()
        text = status_text(s)
        assert f"drain starts at {started['data']['starts_at']}" in text, text
        while time.time() < starts_at - 0.3:   # sampled: nothing evicted, the pod stays, the node closed
            assert s.kube.evictions() == [] and s.kube.pod_names(NODE) == {"web"} and s.cordoned()
            time.sleep(0.1)
        begun = s.wait_event("drain.deferred_started", maint["id"], timeout=10)
        assert parse_rfc3339(begun["ts"]) >= starts_at
        evicted = s.wait_event("drain.evicted", maint["id"], timeout=15)
        assert evicted["data"]["pod"] == "default/web" and parse_rfc3339(evicted["ts"]) >= starts_at
        done = s.wait_event("drain.done", maint["id"], timeout=30)
        assert done["data"]["outcome"] == "done"


def test_a_cordon_only_maintenance_never_evicts_and_is_judged_cordoned(tmp_path):
    with Stack(str(tmp_path), contract=BUDGET, contract_extra={"kinds": {"maintenance": "cordon"}}) as s:
        s.kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
        maint = s.publish_notice(kind="maintenance", deadline_in=20)
        s.wait_event("drain.cordoned", maint["id"], timeout=15)
        verdict = s.wait_event("drain.cordoned_judged", maint["id"], timeout=20)
        assert verdict["data"]["outcome"] == "cordoned" and "cordon only" in verdict["data"]["reason"]
        assert "cordon only" in status_text(s)
        wait_for(lambda: time.time() > parse_rfc3339(maint["deadline"]), 30, "past the deadline")
        assert s.kube.evictions() == [] and s.kube.pod_names(NODE) == {"web"} and s.cordoned()
        assert s.events_of("drain.done", maint["id"]) == [] and s.events_of("drain.deferred_started") == []
