"""GCP metadata as the emulator serves it: the flavor header, ETags, long-polls."""
from __future__ import annotations

import threading

import pytest
import requests

from tests.emulators._control import ControlError
from tests.emulators._http import make_request
from tests.emulators.metadata import MetadataEmulator, gcp

GOOGLE = {"Metadata-Flavor": "Google"}


def gcp_get(emu: MetadataEmulator, key: str, timeout: float = 5,
            **query: str) -> requests.Response:
    return requests.get(f"{emu.url}/computeMetadata/v1/instance/{key}", params=query,
                        headers=GOOGLE, timeout=timeout)


def test_gcp_requires_metadata_flavor_header(emu: MetadataEmulator) -> None:
    """Without Metadata-Flavor: Google the server answers 403, and says it is Google."""
    reply = requests.get(emu.url + "/computeMetadata/v1/instance/preempted", timeout=5)
    assert reply.status_code == 403
    assert reply.headers["Metadata-Flavor"] == "Google"
    reply = requests.get(emu.url + "/computeMetadata/v1/instance/preempted",
                         headers={**GOOGLE, "X-Forwarded-For": "10.0.0.1"}, timeout=5)
    assert reply.status_code == 403


def test_gcp_values_carry_flavor_and_etag(emu: MetadataEmulator) -> None:
    """preempted/maintenance-event/id/name are text with an ETag that follows the value."""
    reply = gcp_get(emu, "preempted")
    assert (reply.status_code, reply.text) == (200, "FALSE")
    assert reply.headers["Metadata-Flavor"] == "Google"
    etag = reply.headers["ETag"]
    assert gcp_get(emu, "preempted").headers["ETag"] == etag
    assert gcp_get(emu, "maintenance-event").text == "NONE"
    assert gcp_get(emu, "id").text == "4520031799277581759"
    assert gcp_get(emu, "name").text == "gce-emu-0"
    emu.gcp_set(preempted=True, maintenance_event="TERMINATE_ON_HOST_MAINTENANCE")
    changed = gcp_get(emu, "preempted")
    assert changed.text == "TRUE" and changed.headers["ETag"] != etag
    assert gcp_get(emu, "maintenance-event").text == "TERMINATE_ON_HOST_MAINTENANCE"
    with pytest.raises(ControlError):
        emu.gcp_set(maintenance_event="SOMETIMES")


def test_gcp_long_poll_returns_when_the_value_changes(emu: MetadataEmulator) -> None:
    """wait_for_change with the current ETag parks until the value changes, then answers."""
    etag = gcp_get(emu, "preempted").headers["ETag"]
    result: dict[str, requests.Response] = {}
    poller = threading.Thread(target=lambda: result.setdefault("reply", gcp_get(
        emu, "preempted", timeout=30, wait_for_change="true", last_etag=etag, timeout_sec="25")))
    poller.start()
    emu.wait_until(lambda: emu.gcp_waiters() == 1)
    assert "reply" not in result
    emu.gcp_set(preempted=True)
    poller.join(10)
    assert not poller.is_alive()
    assert result["reply"].text == "TRUE"
    assert result["reply"].headers["ETag"] != etag


def test_gcp_long_poll_with_stale_etag_returns_at_once(emu: MetadataEmulator) -> None:
    """An ETag that is no longer current answers immediately with the current value."""
    reply = gcp_get(emu, "maintenance-event", timeout=5, wait_for_change="true",
                    last_etag="0000000000000000", timeout_sec="60")
    assert reply.text == "NONE"


def test_gcp_long_poll_times_out_with_the_same_value(emu: MetadataEmulator) -> None:
    """At timeout_sec without a change the answer is the unchanged value and ETag."""
    first = gcp_get(emu, "preempted")
    reply = gcp_get(emu, "preempted", wait_for_change="true",
                    last_etag=first.headers["ETag"], timeout_sec="1")
    assert reply.text == "FALSE"
    assert reply.headers["ETag"] == first.headers["ETag"]


def test_answer_is_a_wait_only_while_the_etag_is_current() -> None:
    """gcp.answer is pure: the current ETag gives a Wait, a stale one the value at once."""
    state = gcp.GcpState()
    current = gcp.etag("FALSE")
    parked = gcp.answer(state, make_request("GET", gcp.PREFIX + "instance/preempted", GOOGLE,
                                            {"wait_for_change": "true", "last_etag": current}))
    assert parked == gcp.Wait("instance/preempted", current, None)
    state.preempted = True
    assert gcp.changed(state, parked)
