"""Volumes gone before "done", with the whole agent (real supervisord, the emulated API server
keeping node.status.volumesAttached as the attach/detach controller does; issue 28, point 6).

A StatefulSet's pod mounts a claim; once the node is empty the verifier waits, within the margin,
for the volume to leave volumesAttached: a detach that takes its time is waited for and its time
recorded (detach_ms); one that never comes makes the verdict "volumes_attached", naming the
volume, never "done". An Azure acknowledgement (which lets the platform take the machine at once)
waits for that verdict too."""
from __future__ import annotations

import time

from common.timefmt import parse_rfc3339
from tests.emulators.kube.controllers import CSI_PREFIX
from tests.support.stack import NODE, Stack
from tests.support.wait import wait_for
from watcher.ack_gate import VERDICT_SLACK_S

BUDGET = {"budget_s": 30, "checkpoint_s": 2, "evict_s": 15, "margin_s": 8}
VOLUME = f"{CSI_PREFIX}default.data-db-0"
DETACH_S = 3.0


def _stateful_pod(s: Stack, **kw: object) -> None:
    s.kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
    s.kube.add_pod("db-0", NODE, owner=("StatefulSet", "db"), claims=("data-db-0",), **kw)
    wait_for(lambda: [v["name"] for v in s.node()["status"].get("volumesAttached") or []] == [VOLUME], 10,
             "the claim attached to the node")


def test_a_volume_that_detaches_late_is_waited_for_and_the_verdict_says_how_long(tmp_path):
    with Stack(str(tmp_path), contract=BUDGET) as s:
        s.kube.set_options(detach_delay=DETACH_S)
        _stateful_pod(s)
        doc = s.publish_notice(kind="reclaim", deadline_in=40)
        verdict = s.wait_event("drain.done", doc["id"], timeout=40)["data"]
        empty = s.wait_event("drain.node_empty", doc["id"])
        # Done only once the volume was gone, at least the detach's time after the node was empty.
        assert verdict["detach_ms"] >= (DETACH_S - 0.5) * 1000
        assert verdict["at"] >= parse_rfc3339(empty["ts"]) + DETACH_S - 0.5
        assert "volumes" not in verdict
        assert not (s.node()["status"].get("volumesAttached") or [])
        assert not s.events_of("drain.volumes_attached", doc["id"])


def test_a_volume_that_never_detaches_keeps_the_verdict_from_done_and_is_named(tmp_path):
    with Stack(str(tmp_path), contract=BUDGET) as s:
        _stateful_pod(s, volume_detach="never")
        doc = s.publish_notice(kind="reclaim", deadline_in=40)
        verdict = s.wait_event("drain.volumes_attached", doc["id"], timeout=40)["data"]
        empty = s.wait_event("drain.node_empty", doc["id"])
        assert verdict["outcome"] == "volumes_attached"
        assert verdict["volumes"] == [VOLUME] and verdict["volumes_count"] == 1
        assert VOLUME in verdict["reason"]
        # It waited the margin after the node was empty (never past the deadline), and no longer.
        assert verdict["at"] >= parse_rfc3339(empty["ts"]) + BUDGET["margin_s"] - 0.5
        assert verdict["at"] <= parse_rfc3339(doc["deadline"]) + 3
        assert not s.events_of("drain.done", doc["id"])
        assert {p["pod"]: p["outcome"] for p in verdict["pods"]} == {"default/web": "evicted",
                                                                      "default/db-0": "evicted"}


def test_an_azure_acknowledgement_waits_for_the_volumes(tmp_path):
    with Stack(str(tmp_path), provider="azure", poll_interval_s=0.3, contract=BUDGET) as s:
        s.kube.set_options(detach_delay=DETACH_S)
        _stateful_pod(s)
        own = s.meta.azure_add("Preempt", in_s=40, resources=["vm-emu-0"])
        verdict = s.wait_event("drain.done", f"azure-{own}", timeout=40)
        [ack] = wait_for(lambda: s.meta.azure_acks()["acks"], 20, "our event acknowledged")
        empty = s.wait_event("drain.node_empty", f"azure-{own}")
        assert ack["event_ids"] == [own]
        assert ack["t"] >= parse_rfc3339(empty["ts"]) + DETACH_S - 0.5     # not while the volume was attached
        assert ack["t"] >= verdict["data"]["at"] - 0.01                    # after the verdict
        assert len(s.meta.azure_acks()["acks"]) == 1


def test_restarts_during_the_wait_neither_acknowledge_twice_nor_never(tmp_path):
    """The watcher and the verifier restarted (supervisorctl) while the volume is still attached:
    the acknowledgement still waits for the verdict, and comes once; the verdict is given once."""
    with Stack(str(tmp_path), provider="azure", poll_interval_s=0.3, contract=BUDGET) as s:
        s.kube.set_options(detach_delay=6.0)
        _stateful_pod(s)
        own = s.meta.azure_add("Preempt", in_s=40, resources=["vm-emu-0"])
        empty = s.wait_event("drain.node_empty", f"azure-{own}", timeout=30)
        assert s.agent is not None
        for program in ("watcher", "verifier"):
            assert "started" in s.agent.ctl("restart", program).stdout
        assert s.meta.azure_acks()["acks"] == []                     # the volume is still attached
        verdict = s.wait_event("drain.done", f"azure-{own}", timeout=40)
        [ack] = wait_for(lambda: s.meta.azure_acks()["acks"], 20, "our event acknowledged")
        assert ack["t"] >= parse_rfc3339(empty["ts"]) + 6.0 - 0.5
        assert ack["t"] >= verdict["data"]["at"] - 0.01
        time.sleep(3.0)   # several more polls, progress messages and verdict announcements
        assert len(s.meta.azure_acks()["acks"]) == 1
        assert len(s.events_of("drain.done", f"azure-{own}")) == 1


def test_an_event_cancelled_during_the_wait_is_never_acknowledged(tmp_path):
    """Azure withdraws the event while the volume is still attached: nothing is acknowledged, then
    or later (the drain is undone; the verdict, if any, acknowledges nothing that is gone)."""
    with Stack(str(tmp_path), provider="azure", poll_interval_s=0.3, contract=BUDGET) as s:
        s.kube.set_options(detach_delay=6.0)
        _stateful_pod(s)
        own = s.meta.azure_add("Preempt", in_s=40, resources=["vm-emu-0"])
        empty = s.wait_event("drain.node_empty", f"azure-{own}", timeout=30)
        s.meta.azure_remove(own)
        s.wait_event("notice.withdrawn", f"azure-{own}", timeout=10)
        # Past the detach and past the wait for a silent verifier (ack_gate): polls and progress go on.
        time.sleep(max(0.0, parse_rfc3339(empty["ts"]) + BUDGET["margin_s"] + VERDICT_SLACK_S + 1.0 - time.time()))
        assert s.meta.azure_acks()["acks"] == []
