"""Azure Scheduled Events: our events only, kinds, deadlines, withdrawal, and the one acknowledgement."""
from __future__ import annotations

import pytest
import ujson

from common.timefmt import parse_gmt
from tests.emulators.metadata.probe import azure_events
from tests.watcher.conftest import make_config
from watcher.providers import MetadataError
from watcher.providers.azure import Source, event_notice, parse_events

EVENT = {"EventId": "602d9444-d2cd-49c7-8624-8643e7171297", "EventType": "Preempt",
         "ResourceType": "VirtualMachine", "Resources": ["vm-emu-0"], "EventStatus": "Scheduled",
         "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "", "EventSource": "Platform",
         "DurationInSeconds": -1}


def doc(*events) -> bytes:
    return ujson.dumps({"DocumentIncarnation": 2, "Events": list(events)}).encode()


@pytest.mark.parametrize("event_type,kind", [("Preempt", "reclaim"), ("Terminate", "reclaim"),
                                             ("Reboot", "maintenance"), ("Redeploy", "maintenance"),
                                             ("Freeze", "pause")])
def test_documented_event_types(event_type, kind):
    events, refused = parse_events(doc({**EVENT, "EventType": event_type}))
    n = event_notice(events[0], "node-a", first_seen=1.0)
    assert not refused and (n.kind, n.detail, n.source) == (kind, event_type, "azure")
    assert n.deadline == parse_gmt("Mon, 19 Sep 2016 18:29:47 GMT")
    assert n.id == "azure-602d9444-d2cd-49c7-8624-8643e7171297"


def test_started_event_without_not_before_is_due_now():
    events, _ = parse_events(doc({**EVENT, "EventStatus": "Started", "NotBefore": ""}))
    assert event_notice(events[0], "node-a", first_seen=50.0).deadline == 50.0


def test_one_bad_event_does_not_hide_the_next():
    events, refused = parse_events(doc({**EVENT, "EventType": "Explode", "EventId": "a"},
                                       {**EVENT, "EventId": "b/../x"}, EVENT))
    assert [e.event_id for e in events] == [EVENT["EventId"]] and len(refused) == 2


@pytest.mark.parametrize("body", [b"", b"[]", b'{"Events": {}}', b"<html>"])
def test_bad_documents_are_refused(body):
    with pytest.raises(MetadataError):
        parse_events(body)


def source(emu, node="node-a") -> Source:
    return Source(make_config("azure", emu.url, node=node))


def test_only_events_for_this_vm(emu):
    """Events are broadcast to the placement group: another VM's Preempt is not ours."""
    emu.azure_add("Preempt", resources=["vm-other"])
    src = source(emu)
    assert src.poll(emu.now()).notices == []
    mine = emu.azure_add("Terminate", in_s=600)
    r = src.poll(emu.now())
    assert [(n.id, n.kind) for n in r.notices] == [(f"azure-{mine}", "reclaim")]
    assert abs(r.notices[0].deadline - (emu.now() + 600)) < 2


def test_node_name_matches_too(emu):
    emu.azure_add("Preempt", resources=["node-b"])
    assert [n.kind for n in source(emu, node="node-b").poll(emu.now()).notices] == ["reclaim"]


def test_vanished_before_start_is_withdrawn(emu):
    src = source(emu)
    event = emu.azure_add("Reboot")
    held = src.poll(emu.now()).notices[0]
    emu.azure_remove(event)
    assert src.poll(emu.now()).withdrawn == [held.id]


def test_after_start_a_reclaim_stays_and_a_maintenance_ends(emu):
    src = source(emu)
    preempt, freeze = emu.azure_add("Preempt"), emu.azure_add("Freeze")
    held = {n.detail: n for n in src.poll(emu.now()).notices}
    emu.azure_status(preempt, "Started")
    emu.azure_status(freeze, "Started")
    assert {n.detail: n for n in src.poll(emu.now()).notices} == held   # deadlines kept once Started
    emu.azure_remove(preempt)
    emu.azure_remove(freeze)
    assert src.poll(emu.now()).withdrawn == [held["Freeze"].id]


def test_drained_acknowledges_once_while_scheduled(emu):
    src = source(emu)
    event = emu.azure_add("Preempt", in_s=30)
    other = emu.azure_add("Terminate", resources=["vm-other"])
    n = src.poll(emu.now()).notices[0]
    src.drained(["relay-id", n.id, f"azure-{other}"], emu.now())
    src.drained([n.id], emu.now())
    acks = emu.azure_acks()["acks"]
    assert [a["event_ids"] for a in acks] == [[event]] and acks[0]["started"] == [event]
    src.poll(emu.now())
    src.drained([n.id], emu.now())          # Started now: nothing to acknowledge
    assert len(emu.azure_acks()["acks"]) == 1


def test_failed_acknowledgement_raises_and_is_retried(emu):
    src = source(emu)
    event = emu.azure_add("Preempt")
    n = src.poll(emu.now()).notices[0]
    emu.fault("status", path="/metadata/scheduledevents", method="POST", status=500, count=1)
    with pytest.raises(MetadataError):
        src.drained([n.id], emu.now())
    src.drained([n.id], emu.now())
    assert [a["event_ids"] for a in emu.azure_acks()["acks"]] == [[event]]


def test_vm_name_comes_from_compute_metadata(emu):
    src = source(emu, node="k8s-node-name")
    emu.azure_add("Preempt")
    assert src.poll(emu.now()).notices and src.vm_name == "vm-emu-0"
    assert all(r["headers"].get("metadata") == "true" for r in emu.requests("/metadata"))


def test_a_shared_event_is_never_acknowledged_and_the_withholding_is_said_once(emu):
    """An event naming this VM and others: acknowledging it would start it for the others too
    (Azure: "... for all Resources in the event, not just the VM that acknowledges the event"),
    so nothing is POSTed and no VM is released; ``drained`` says why, once per event."""
    src = source(emu)
    shared = emu.azure_add("Reboot", resources=["vm-emu-0", "vm-other"])
    n = src.poll(emu.now()).notices[0]
    [w] = src.drained([n.id], emu.now())
    assert (w.notice_id, w.reason, w.others) == (n.id, "shared_event", ("vm-other",))
    assert "all 2 VMs" in w.detail
    assert src.drained([n.id], emu.now()) == []          # said once
    src.poll(emu.now())
    assert src.drained([n.id], emu.now()) == []
    assert emu.azure_acks()["acks"] == [] and emu.azure_released() == {}
    assert [e["EventStatus"] for e in azure_events(emu.url)["Events"] if e["EventId"] == shared] == ["Scheduled"]


def test_our_own_event_is_still_acknowledged_beside_a_shared_one(emu):
    """A mixed round: our own Preempt (Resources: this VM alone) is acknowledged after the drain,
    the shared Reboot is withheld; only this VM is released."""
    src = source(emu)
    own = emu.azure_add("Preempt", resources=["vm-emu-0"])
    shared = emu.azure_add("Reboot", resources=["vm-emu-0", "vm-other", "vm-third"])
    held = {n.detail: n for n in src.poll(emu.now()).notices}
    withheld = src.drained([held["Preempt"].id, held["Reboot"].id], emu.now())
    assert [(w.notice_id, w.others) for w in withheld] == [(held["Reboot"].id, ("vm-other", "vm-third"))]
    assert [a["event_ids"] for a in emu.azure_acks()["acks"]] == [[own]]
    assert emu.azure_released() == {"vm-emu-0": [own]}
    assert shared not in emu.azure_released().get("vm-other", [])


def test_an_event_naming_this_vm_by_both_names_is_ours_alone(emu):
    src = source(emu, node="k8s-node-a")
    own = emu.azure_add("Preempt", resources=["vm-emu-0", "k8s-node-a"])
    n = src.poll(emu.now()).notices[0]
    assert src.drained([n.id], emu.now()) == []
    assert emu.azure_released() == {"vm-emu-0": [own], "k8s-node-a": [own]}


def test_no_acknowledgement_before_the_events_resources_are_read(emu):
    """After a restart the held notice is resumed, but until a poll has read its Resources the
    acknowledgement waits (MetadataError: the drain is reported again next round)."""
    emu.azure_add("Reboot", resources=["vm-emu-0", "vm-other"])
    first = source(emu)
    n = first.poll(emu.now()).notices[0]
    again = source(emu)
    again.resume([n])
    with pytest.raises(MetadataError):
        again.drained([n.id], emu.now())
    assert emu.azure_acks()["acks"] == []
