"""Azure Scheduled Events as the emulator serves them: incarnation, StartRequests."""
from __future__ import annotations

import re
from email.utils import parsedate_to_datetime

import pytest
import requests

from tests.emulators.metadata import MetadataEmulator
from tests.emulators.metadata.probe import azure_events

AZURE = {"Metadata": "true"}
EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
RFC1123 = re.compile(r"^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$")


def azure_doc(emu: MetadataEmulator) -> dict:
    return azure_events(emu.url)


def test_azure_requires_metadata_header_and_api_version(emu: MetadataEmulator) -> None:
    """Missing Metadata: true or api-version -> 400 with an error body."""
    assert requests.get(emu.url + EVENTS, timeout=5).status_code == 400
    reply = requests.get(emu.url + "/metadata/scheduledevents", headers=AZURE, timeout=5)
    assert reply.status_code == 400 and "api-version" in reply.json()["error"]


def test_azure_events_document_and_incarnation(emu: MetadataEmulator) -> None:
    """Adding, starting and removing an event each increment DocumentIncarnation."""
    empty = azure_doc(emu)
    assert empty["Events"] == []
    event_id = emu.azure_add("Preempt", in_s=30)
    doc = azure_doc(emu)
    assert doc["DocumentIncarnation"] == empty["DocumentIncarnation"] + 1
    [event] = doc["Events"]
    assert set(event) == {"EventId", "EventType", "ResourceType", "Resources", "EventStatus",
                          "NotBefore", "Description", "EventSource", "DurationInSeconds"}
    assert (event["EventId"], event["EventType"], event["EventStatus"]) == (
        event_id, "Preempt", "Scheduled")
    assert event["Resources"] == ["vm-emu-0"] and event["ResourceType"] == "VirtualMachine"
    assert RFC1123.match(event["NotBefore"])
    not_before = parsedate_to_datetime(event["NotBefore"]).timestamp()
    assert abs(not_before - (emu.now() + 30)) < 3
    assert azure_doc(emu)["DocumentIncarnation"] == doc["DocumentIncarnation"]  # reads: no change
    emu.azure_status(event_id, "Started")
    started = azure_doc(emu)
    assert started["DocumentIncarnation"] == doc["DocumentIncarnation"] + 1
    assert started["Events"][0]["NotBefore"] == ""
    emu.azure_remove(event_id)
    gone = azure_doc(emu)
    assert gone["Events"] == [] and gone["DocumentIncarnation"] == started["DocumentIncarnation"] + 1


def test_azure_start_request_starts_the_event_and_is_recorded(emu: MetadataEmulator) -> None:
    """POST {"StartRequests":[{"EventId":...}]} -> 200, the event goes Started, ack recorded."""
    event_id = emu.azure_add("Terminate", resources=["vm-emu-0", "vm-other"])
    before = azure_doc(emu)["DocumentIncarnation"]
    reply = requests.post(emu.url + EVENTS, headers=AZURE, timeout=5,
                          json={"StartRequests": [{"EventId": event_id}]})
    assert reply.status_code == 200
    doc = azure_doc(emu)
    assert doc["Events"][0]["EventStatus"] == "Started"
    assert doc["DocumentIncarnation"] == before + 1
    [ack] = emu.azure_acks()["acks"]
    assert ack["event_ids"] == [event_id] and ack["started"] == [event_id]


def test_azure_one_acknowledgement_releases_every_vm_the_event_names(emu: MetadataEmulator) -> None:
    """Microsoft: "Acknowledging an event allows the event to proceed for all Resources in the
    event, not just the VM that acknowledges the event." The status is the event's."""
    shared = emu.azure_add("Reboot", resources=["vm-emu-0", "vm-other", "vm-third"])
    alone = emu.azure_add("Preempt", resources=["vm-fourth"])
    requests.post(emu.url + EVENTS, headers=AZURE, timeout=5, json={"StartRequests": [{"EventId": shared}]})
    [ack] = emu.azure_acks()["acks"]
    assert ack["released"] == {"vm-emu-0": [shared], "vm-other": [shared], "vm-third": [shared]}
    assert emu.azure_released() == ack["released"]
    status = {e["EventId"]: e["EventStatus"] for e in azure_doc(emu)["Events"]}
    assert status == {shared: "Started", alone: "Scheduled"}


@pytest.mark.parametrize("body", [b"not json", b"{}", b'{"StartRequests": []}',
                                  b'{"StartRequests": [{"EventId": 5}]}',
                                  b'{"StartRequests": {"EventId": "x"}}', b"[]"])
def test_azure_malformed_start_request_is_400(emu: MetadataEmulator, body: bytes) -> None:
    """A body that is not a StartRequests list of EventIds -> 400, counted, nothing started."""
    emu.azure_add("Preempt")
    reply = requests.post(emu.url + EVENTS, headers=AZURE, data=body, timeout=5)
    assert reply.status_code == 400
    assert emu.azure_acks() == {"acks": [], "rejected": 1}
    assert azure_doc(emu)["Events"][0]["EventStatus"] == "Scheduled"


def test_azure_compute_name_as_text(emu: MetadataEmulator) -> None:
    """instance/compute/name with format=text is the bare VM name."""
    reply = requests.get(emu.url + "/metadata/instance/compute/name",
                         params={"api-version": "2021-02-01", "format": "text"},
                         headers=AZURE, timeout=5)
    assert (reply.status_code, reply.text) == (200, "vm-emu-0")
