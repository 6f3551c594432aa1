"""The watcher process end to end: channels failing and coming back, one notice, cancel, restart."""
from __future__ import annotations

import time

import pytest
import ujson
import zmq

from common import ipc
from common.timefmt import format_rfc3339
from tests.support.drain_records import budget, record_dict
from tests.support.nats_rig import NatsServer
from tests.support.procutil import free_port
from tests.support.wait import wait_for
from tests.watcher.rig import WatcherRig

INSTANCE = "i-0123456789abcdef0"      # the AWS emulator's instance
NODE_SUBJECT, HALL_SUBJECT = "sco.notice.h1.node-a", "sco.notice.h1.all"


def payload(id: str = "n-1", kind: str = "reclaim", node: str = "node-a", deadline: float | str | None = None,
            issued_at: float | None = None, instance_id: str = INSTANCE) -> bytes:
    now = time.time()
    if not isinstance(deadline, str):
        deadline = format_rfc3339(deadline if deadline is not None else now + 120)
    return ujson.dumps({"v": 1, "id": id, "kind": kind, "node": node, "instance_id": instance_id,
                        "issued_at": format_rfc3339(issued_at if issued_at is not None else now),
                        "deadline": deadline, "source": "sco"}).encode()


@pytest.fixture
def rig_factory(tmp_path):
    rigs: list[WatcherRig] = []

    def make(**kw) -> WatcherRig:
        rig = WatcherRig(tmp_path / f"w{len(rigs)}", **kw)
        rigs.append(rig)
        return rig.start()
    yield make
    for rig in rigs:
        rig.stop()


def test_same_reclaim_on_relay_and_metadata_is_one_notice(nats, emu, rig_factory):
    """Relay first, then every metadata poll: one notice, one notice.received, arrivals per channel."""
    rig = rig_factory(relay=[nats.url], provider="aws", url=emu.url)
    rig.wait_counter("relay.connected")
    spot = emu.aws_spot("terminate", in_s=120)
    nats.publish(NODE_SUBJECT, payload(deadline=spot["time"]))
    rig.wait_counter("duplicate.metadata", at_least=3)
    (notice,) = rig.sub.active()
    assert notice["id"] == "n-1" and notice["channel"] == "relay"
    arrivals = rig.sub.latest["arrivals"]["n-1"]
    assert set(arrivals) == {"relay", "metadata"}
    assert arrivals["relay"] == notice["received_at"] <= arrivals["metadata"]
    assert len(rig.spool.wait_of_type("notice.received")) == 1
    (dup,) = rig.spool.wait_of_type("notice.duplicate")
    assert dup["notice_id"] == "n-1" and dup["data"]["channel"] == "metadata"


def test_relay_down_at_start_then_restarted_while_the_poll_still_hears(tmp_path, emu, rig_factory):
    nats = NatsServer(str(tmp_path / "nats.log"))
    try:
        rig = rig_factory(relay=[nats.url], provider="sco", url=emu.url)
        rig.wait_counter("relay.error")
        nats.start()
        rig.wait_counter("relay.connected", timeout=15)
        nats.publish(NODE_SUBJECT, payload("n-1"))
        rig.wait_notice(lambda n: n["id"] == "n-1")

        nats.stop()
        rig.wait_counter("relay.disconnected")
        emu.sco_notice(id="n-2", node="node-a", in_s=300)
        assert rig.wait_notice(lambda n: n["id"] == "n-2")["channel"] == "metadata"

        nats.start()
        rig.wait_counter("relay.reconnected", timeout=15)

        def heard() -> bool:
            nats.publish(NODE_SUBJECT, payload("n-3", deadline=time.time() + 600))
            return any(n["id"] == "n-3" for n in rig.sub.active())
        wait_for(heard, 10, "a relay notice after the restart", interval=0.2)
        assert len(rig.spool.wait_of_type("notice.received", 3)) == 3
    finally:
        nats.stop()


def test_metadata_down_while_the_relay_works(nats, emu, rig_factory):
    emu.down()
    rig = rig_factory(relay=[nats.url], provider="aws", url=emu.url)
    rig.wait_counter("relay.connected")
    nats.publish(HALL_SUBJECT, payload(node="*"))
    rig.wait_notice(lambda n: n["id"] == "n-1")
    wait_for(lambda: sum(v for k, v in rig.sub.counters().items() if k.startswith("metadata.error.")) >= 1, 10,
             "a metadata error counted")
    assert rig.spool.wait_of_type("metadata.error")


def test_both_down_the_watcher_stays_up_and_counts(tmp_path, rig_factory):
    dead = NatsServer()   # never started
    rig = rig_factory(relay=[dead.url], provider="gcp", url=f"http://127.0.0.1:{free_port()}")
    rig.wait_counter("relay.error", at_least=2)
    wait_for(lambda: rig.sub.counters().get("metadata.error.refused", 0) >= 3, 10, "metadata errors counted")
    announced = len(rig.sub.states)
    wait_for(lambda: len(rig.sub.states) >= announced + 2, 5, "announces keep coming")
    assert rig.alive() and rig.sub.active() == []
    # Repeats are counted, not logged every time.
    assert len([r for r in rig.log_records() if r.get("msg") == "metadata.error"]) == 1


def test_cancel_withdraws_the_notice(nats, rig_factory):
    rig = rig_factory(relay=[nats.url])
    rig.wait_counter("relay.connected")
    nats.publish(NODE_SUBJECT, payload("n-1"))
    rig.wait_notice(lambda n: n["id"] == "n-1")
    nats.publish(NODE_SUBJECT, payload("n-1", kind="cancel"))
    wait_for(lambda: rig.sub.active() == [] and "n-1" in rig.sub.latest["withdrawn"], 10, "withdrawn")
    nats.publish(NODE_SUBJECT, payload("n-1"))     # a late repeat does not revive it
    rig.wait_counter("ignored.reason.withdrawn")
    assert rig.sub.active() == [] and len(rig.spool.wait_of_type("notice.withdrawn")) == 1


def test_other_nodes_and_garbage_are_counted_not_acted_on(nats, rig_factory):
    rig = rig_factory(relay=[nats.url])
    rig.wait_counter("relay.connected")
    for _ in range(2):
        nats.publish(HALL_SUBJECT, payload("b-1", node="node-b"))
    nats.publish(NODE_SUBJECT, b"\xff{not json")
    nats.publish(NODE_SUBJECT, payload("x", deadline="tomorrow"))
    rig.wait_counter("ignored.reason.other_node", at_least=2)
    rig.wait_counter("rejected.bad_json")
    rig.wait_counter("rejected.bad_time")
    assert rig.sub.active() == []
    assert len(rig.spool.wait_of_type("notice.ignored")) == 1      # reported once, counted twice
    assert {e["data"]["reason"] for e in rig.spool.wait_of_type("notice.rejected", 2)} == {"bad_json", "bad_time"}


def test_clock_off_never_loses_a_notice(nats, rig_factory):
    """A deadline already past still drains; an issued_at in the future is accepted."""
    rig = rig_factory(relay=[nats.url])
    rig.wait_counter("relay.connected")
    nats.publish(NODE_SUBJECT, payload("late", deadline=time.time() - 3600))
    nats.publish(NODE_SUBJECT, payload("future", issued_at=time.time() + 3600, deadline=time.time() + 3720))
    rig.wait_notice(lambda n: n["id"] == "late")
    rig.wait_notice(lambda n: n["id"] == "future")
    late = wait_for(lambda: next((e for e in rig.spool.of_type("notice.received") if e["notice_id"] == "late"), None),
                    10, "notice.received of 'late'")
    assert late["data"]["late"] is True


def test_active_notice_survives_a_killed_watcher(nats, rig_factory):
    rig = rig_factory(relay=[nats.url])
    rig.wait_counter("relay.connected")
    nats.publish(NODE_SUBJECT, payload("n-1"))
    before = rig.wait_notice(lambda n: n["id"] == "n-1")
    rig.stop_watcher(sig_kill=True)
    rig.sub.states.clear()
    rig.start_watcher()
    after = rig.wait_notice(lambda n: n["id"] == "n-1")
    assert after["received_at"] == before["received_at"]
    assert len(rig.spool.wait_of_type("notice.received")) == 1


def test_gcp_long_poll_is_heard_before_the_poll_interval(emu, rig_factory):
    """With a 30 s floor, a change heard within 10 s can only have come through the long-poll."""
    rig = rig_factory(provider="gcp", url=emu.url, interval_s=30.0)
    wait_for(lambda: emu.gcp_waiters() == 2, 10, "the watcher's long-polls parked")
    emu.gcp_set(maintenance_event="MIGRATE_ON_HOST_MAINTENANCE")
    held = rig.wait_notice(lambda n: n["kind"] == "live_migration", timeout=10)
    emu.gcp_set(maintenance_event="NONE")
    wait_for(lambda: held["id"] in rig.sub.latest.get("withdrawn", []), 10, "withdrawn through the long-poll")


def test_azure_event_is_acknowledged_once_after_the_drain_and_its_verdict(emu, rig_factory):
    """The executor's "done" alone does not acknowledge: the acknowledgement lets Azure take the
    machine at once, so it waits for the verifier's verdict, which waits for the node's volumes to
    detach (issue 28, point 6). Then once, however often both are repeated."""
    rig = rig_factory(provider="azure", url=emu.url, node="vm-emu-0")
    event = emu.azure_add("Preempt", in_s=60)
    held = rig.wait_notice(lambda n: n["detail"] == "Preempt")
    executor = ipc.bind(rig.ctx, zmq.PUB, rig.run_dir, ipc.EXECUTOR_PUB)
    verifier = ipc.bind(rig.ctx, zmq.PUB, rig.run_dir, ipc.VERIFIER_PUB)
    try:
        def done() -> None:
            ipc.send(executor, ipc.T_PROGRESS, {"notices": {held["id"]: record_dict(state="done")}})

        until = time.monotonic() + 3.0   # several polls with the drain done and no verdict yet
        while time.monotonic() < until:
            done()
            time.sleep(0.2)
        assert emu.azure_acks()["acks"] == []

        def acked() -> bool:
            done()
            ipc.send(verifier, ipc.T_VERDICT, {"notices": {held["id"]: {"outcome": "done", "at": time.time()}}})
            return bool(emu.azure_acks()["acks"])
        wait_for(acked, 10, "the acknowledgement", interval=0.2)
        rounds = rig.sub.counters().get("duplicate.metadata", 0)

        def more_rounds_with_done_repeated() -> bool:
            acked()
            return rig.sub.counters().get("duplicate.metadata", 0) >= rounds + 3
        wait_for(more_rounds_with_done_repeated, 10, "three more rounds", interval=0.1)
        assert [a["event_ids"] for a in emu.azure_acks()["acks"]] == [[event]]
    finally:
        executor.close(0)
        verifier.close(0)


def test_azure_acknowledgement_without_a_verdict_waits_for_the_margin_then_goes(emu, rig_factory):
    """A verifier that says nothing (down, restarting) holds the acknowledgement up only until the
    margin after the node was empty (and the verifier's own read, ack_gate.VERDICT_SLACK_S): late,
    never never."""
    from watcher.ack_gate import VERDICT_SLACK_S
    rig = rig_factory(provider="azure", url=emu.url, node="vm-emu-0")
    event = emu.azure_add("Preempt", in_s=60)
    held = rig.wait_notice(lambda n: n["detail"] == "Preempt")
    executor = ipc.bind(rig.ctx, zmq.PUB, rig.run_dir, ipc.EXECUTOR_PUB)
    empty_at = time.time()
    rec = record_dict(state="done", budget=budget(1, 1, 2), steps={"node_empty": empty_at})
    try:
        def acked() -> bool:
            ipc.send(executor, ipc.T_PROGRESS, {"notices": {held["id"]: rec}})
            return bool(emu.azure_acks()["acks"])
        wait_for(acked, 2 + VERDICT_SLACK_S + 10, "the acknowledgement", interval=0.2)
        assert time.time() >= empty_at + 2 + VERDICT_SLACK_S   # not before the margin (and slack) passed
        assert [a["event_ids"] for a in emu.azure_acks()["acks"]] == [[event]]
    finally:
        executor.close(0)
