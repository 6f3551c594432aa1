"""Issue 26 with the whole agent under supervisord (the API-server emulator, a real nats-server):

1. a reclaim that arrives behind a maintenance drain held by a PodDisruptionBudget takes the drain
   over -- its own cordon and taint, its own deadline -- and its verdict names the pod that held it;
2. cancelling either of two notices, while the drain runs, never opens the node: a sampler reads the
   node's ``unschedulable`` and our taint every 100 ms;
4. the fallback does not power off on a marker the state dir refused: an event and the verdict say so.
"""
from __future__ import annotations

import os
import shutil
import time
from typing import Any

import pytest

from common.contract import BUILTIN
from executor.kube.node_patch import A_NOTICE
from tests.support.sampler import Sampler
from tests.support.stack import NODE, Stack
from tests.support.wait import wait_for

TAINT = "sco.io/notice"
# The built-in budget, the maintenance's drain at once (the built-in start defers it to deadline -
# budget_s: test_deferred_start_e2e.py): these are drains in progress that a reclaim meets.
MAINTENANCE_AT_ONCE: dict[str, Any] = {"contract": BUILTIN.to_dict()["drain"],
                                       "contract_extra": {"start": {"maintenance": "at_once"}}}


def taint_value(s: Stack) -> str | None:
    return next((t["value"] for t in s.node()["spec"].get("taints") or [] if t["key"] == TAINT), None)


def held_by_a_pdb(s: Stack) -> None:
    """A pod no eviction may take (its PDB allows no disruption), as in the issue."""
    s.kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
    s.kube.add_pod("db-0", NODE, labels={"app": "db"}, owner=("StatefulSet", "db"))


def test_a_reclaim_behind_a_maintenance_drain_takes_it_over(tmp_path):
    with Stack(str(tmp_path), **MAINTENANCE_AT_ONCE) as s:
        held_by_a_pdb(s)
        maintenance = s.publish_notice(kind="maintenance", deadline_in=600)
        s.wait_event("drain.eviction_blocked", maintenance["id"], timeout=30)
        assert taint_value(s) == "maintenance"
        time.sleep(2)
        reclaim = s.publish_notice(kind="reclaim", deadline_in=20)
        s.wait_event("drain.cordoned", reclaim["id"], timeout=15)
        # Its own cordon: the taint value and the annotation name the reclaim now.
        wait_for(lambda: taint_value(s) == "reclaim" and s.node()["metadata"]["annotations"].get(A_NOTICE)
                 == reclaim["id"], 10, "the node marked for the reclaim")
        blocked = s.wait_event("drain.eviction_blocked", reclaim["id"], timeout=15)
        assert blocked["data"]["pod"] == "default/db-0"
        verdict = s.wait_event("drain.overrun", reclaim["id"], timeout=40)
        assert verdict["data"]["left"] == ["default/db-0"]
        assert verdict["data"]["held_up_by"] != "cordon"
        assert s.cordoned()
        # The maintenance is still active and served by the same drain: no verdict yet, node closed.
        assert s.events_of("drain.overrun", maintenance["id"]) == []


def cordon_and_taint(s: Stack) -> tuple[float, bool, str | None]:
    """The node's cordon and our taint (sampled every 100 ms, from the test's own thread)."""
    node = s.node()
    return time.time(), bool(node["spec"].get("unschedulable")), taint_value(s)


@pytest.mark.parametrize("cancel_first", ["later", "earlier"])
def test_cancelling_one_of_two_never_opens_the_node(tmp_path, cancel_first):
    with Stack(str(tmp_path), **MAINTENANCE_AT_ONCE) as s:
        held_by_a_pdb(s)
        maintenance = s.publish_notice(kind="maintenance", deadline_in=600)
        s.wait_event("drain.eviction_blocked", maintenance["id"], timeout=30)
        reclaim = s.publish_notice(kind="reclaim", deadline_in=120)
        s.wait_event("drain.eviction_blocked", reclaim["id"], timeout=30)   # its own drain runs
        first, second = (maintenance, reclaim) if cancel_first == "later" else (reclaim, maintenance)
        sampler = Sampler(lambda: cordon_and_taint(s), 0.1)
        try:
            s.publish_notice(kind="cancel", notice_id=first["id"])
            kept = s.wait_event("drain.uncordoned", first["id"], timeout=20)
            assert kept["data"]["action"] == "kept_for_other_notice"
            wait_for(lambda: taint_value(s) == second["kind"], 10, "the taint naming the notice left")
            time.sleep(2)
        finally:
            samples = sampler.stop()
        assert len(samples) >= 10   # about 3 s of them (fewer on a loaded machine)
        assert [x for x in samples if not (x[1] and x[2] is not None)] == []
        assert s.node()["metadata"]["annotations"][A_NOTICE] == second["id"]
        # The last one cancelled: now the node opens.
        s.publish_notice(kind="cancel", notice_id=second["id"])
        wait_for(lambda: not s.cordoned() and taint_value(s) is None, 20, "the node opened")
        s.wait_event("drain.uncordoned", second["id"])


def test_a_fallback_marker_the_disk_refused_powers_nothing_off(tmp_path):
    marker = tmp_path / "poweroff-ran"
    settings: dict[str, dict[str, Any]] = {
        "kubernetes": {"fallback_command": ["touch", str(marker)], "timeout_s": 1.0}}
    with Stack(str(tmp_path / "stack"), settings=settings) as s:
        s.kube.add_pod("app", NODE)
        s.kube.down()
        # The built-in contract: a reclaim falls back 10 s (the kubelet's grace) + 2 s before the deadline.
        doc = s.publish_notice(deadline_in=22)
        s.wait_event("drain.started", doc["id"])
        # The state dir stops taking the executor's state: its file is replaced by a directory, so
        # the atomic rename of every later save fails, as on a disk that refuses writes.
        state = os.path.join(s.agent.state_dir, "executor.json")
        wait_for(lambda: os.path.exists(state), 10, "the executor's state file")
        os.unlink(state)
        os.mkdir(state)
        try:
            refused = s.wait_event("drain.fallback", doc["id"], timeout=30)
            assert refused["data"]["ran"] is False and "could not be saved" in refused["data"]["reason"]
            assert s.events_of("drain.fallback_started", doc["id"]) == []
            verdict = s.wait_event("drain.overrun", doc["id"], timeout=30)
            assert "fallback:not-run-unsaved" in verdict["data"]["left"]
            assert not marker.exists()
        finally:
            shutil.rmtree(state, ignore_errors=True)
            s.kube.up()
