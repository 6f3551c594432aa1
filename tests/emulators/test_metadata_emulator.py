"""The metadata emulator's scenario, control API, faults and request log, in-process
and as the subprocess the fixture starts (stopped by PID, memory checked).

Each provider's documented behaviour is tested in test_metadata_<provider>.py.
"""
from __future__ import annotations

import http.client
import json
import subprocess
import sys
from urllib.parse import urlsplit

import psutil
import pytest
import requests

from tests.emulators._control import ControlError
from tests.emulators._process import REPO_ROOT
from tests.emulators.metadata import MetadataEmulator
from tests.emulators.metadata.probe import (
    META,
    TOKEN_HEADER,
    TTL_HEADER,
    azure_events,
    imds_get,
    imds_token,
)
from tests.emulators.metadata_fixture import MetadataProcess

# -- scenario and control API -----------------------------------------------------------

def test_scenario_sets_providers_and_identity() -> None:
    """Only the scenario's providers answer; their identity comes from the scenario."""
    scenario = {"aws": {"instance_id": "i-0feedfacecafe0001", "availability_zone": "eu-west-1b"}}
    with MetadataEmulator(("aws",), scenario) as emu:
        assert imds_get(emu.url, "instance-id", imds_token(emu.url)).text == "i-0feedfacecafe0001"
        assert requests.get(emu.url + "/sco/v1/notice", timeout=5).status_code == 404
        with pytest.raises(ControlError, match="not in this scenario"):
            emu.gcp_set(preempted=True)
    with pytest.raises(ValueError):
        MetadataEmulator(("aws",), {"aws": {"instance_id": 5}})
    with pytest.raises(ValueError):
        MetadataEmulator(("ibm",))


def test_control_api_rejects_unknown_commands_and_bad_bodies(emu: MetadataEmulator) -> None:
    """Unknown command -> 404, bad body -> 400, both with an error envelope."""
    reply = requests.post(emu.control_url + "/_emu/nope", json={}, timeout=5)
    assert reply.status_code == 404 and reply.json()["ok"] is False
    reply = requests.post(emu.control_url + "/_emu/aws/spot", data=b"{", timeout=5)
    assert reply.status_code == 400
    reply = requests.post(emu.control_url + "/_emu/aws/spot", json={"action": "explode"},
                          timeout=5)
    assert reply.status_code == 400 and "action" in reply.json()["error"]


def test_reset_returns_to_the_start_scenario(emu: MetadataEmulator) -> None:
    """reset clears notices, events, clock offset and faults."""
    emu.aws_spot()
    emu.azure_add()
    emu.advance_clock(1000)
    emu.fault("status", status=500)
    emu.reset()
    assert imds_get(emu.url, "spot/instance-action", imds_token(emu.url)).status_code == 404
    assert azure_events(emu.url)["Events"] == []
    assert emu.faults() == []


# -- faults and the request log ---------------------------------------------------------

def test_fault_status_for_n_requests_then_normal(emu: MetadataEmulator) -> None:
    """A 500 rule with count 2 fires twice on its path, then the service answers again."""
    tok = imds_token(emu.url)
    emu.fault("status", status=500, count=2, path=META)
    assert [imds_get(emu.url, "instance-id", tok).status_code for _ in range(3)] == [500, 500, 200]


def test_fault_probability_is_seeded() -> None:
    """A probabilistic rule fails some requests and not others, the same way for a seed."""
    def run(seed: int) -> list[int]:
        with MetadataEmulator(("sco",), seed=seed) as local:
            local.fault("status", status=503, probability=0.5)
            return [requests.get(local.url + "/sco/v1/notice", timeout=5).status_code
                    for _ in range(40)]
    first = run(7)
    assert set(first) == {404, 503}
    assert run(7) == first


def test_fault_hang_times_the_client_out(emu: MetadataEmulator) -> None:
    """A hung answer never comes: the client's own timeout is what ends it."""
    emu.fault("hang", seconds=30, count=1)
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(emu.url + "/sco/v1/notice", timeout=0.3)
    assert requests.get(emu.url + "/sco/v1/notice", timeout=5).status_code == 404


def test_fault_close_and_short_bodies(emu: MetadataEmulator) -> None:
    """'close' drops the connection unanswered; 'short' stops before Content-Length."""
    parts = urlsplit(emu.url)
    emu.fault("close", count=1)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    conn.request("GET", "/sco/v1/notice")
    with pytest.raises(http.client.RemoteDisconnected):
        conn.getresponse()
    conn.close()
    emu.fault("short", count=1)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    conn.request("GET", "/sco/v1/notice")
    with pytest.raises(http.client.IncompleteRead):
        conn.getresponse().read()
    conn.close()


def test_fault_garbage_body_is_not_json(emu: MetadataEmulator) -> None:
    """'garbage' answers 200 with a body no JSON parser accepts."""
    emu.fault("garbage", count=1, path="/sco/")
    reply = requests.get(emu.url + "/sco/v1/notice", timeout=5)
    assert reply.status_code == 200
    with pytest.raises(ValueError):
        json.loads(reply.content)


def test_fault_huge_chunked_body_has_no_length(emu: MetadataEmulator) -> None:
    """A chunked enormous body carries no Content-Length; only a client cap stops it."""
    emu.fault("huge", size=10 * 1024 * 1024, chunked=True, count=1)
    parts = urlsplit(emu.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("GET", "/sco/v1/notice")
    reply = conn.getresponse()
    assert reply.getheader("Content-Length") is None
    total = sum(len(chunk) for chunk in iter(lambda: reply.read(1 << 20), b""))
    conn.close()
    assert total == 10 * 1024 * 1024


def test_not_listening_means_connection_refused(emu: MetadataEmulator) -> None:
    """Closing the service port refuses connections; reopening serves on the same URL."""
    emu.down()
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(emu.url + "/sco/v1/notice", timeout=2)
    emu.up()
    assert requests.get(emu.url + "/sco/v1/notice", timeout=5).status_code == 404


def test_chunked_request_body_is_refused_411(emu: MetadataEmulator) -> None:
    """Apps that do not read chunked bodies say so, and close: the framing is not followed."""
    parts = urlsplit(emu.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    conn.request("PUT", "/latest/api/token", body=iter([b"x"]), encode_chunked=True)
    reply = conn.getresponse()
    assert reply.status == 411 and reply.getheader("Connection") == "close"
    conn.close()
    assert emu.requests() == []


def test_down_reset_resets_requests_and_reset_brings_it_up(emu: MetadataEmulator) -> None:
    """'reset' mode accepts and resets every request; the reset command ends it."""
    emu.down("reset")
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(emu.url + "/sco/v1/notice", timeout=2)
    assert [(r["status"], r["fault"]) for r in emu.requests()] == [(None, "reset")]
    emu.reset()
    assert requests.get(emu.url + "/sco/v1/notice", timeout=5).status_code == 404


def test_request_log_records_path_headers_status_and_fault(emu: MetadataEmulator) -> None:
    """Every service request is logged with the headers that matter and its outcome."""
    tok = imds_token(emu.url)
    imds_get(emu.url, "instance-id", tok)
    emu.fault("status", status=500, count=1)
    imds_get(emu.url, "instance-id", tok)
    put, get, failed = emu.requests("/latest/")
    assert (put["method"], put["status"], put["headers"][TTL_HEADER.lower()]) == ("PUT", 200, "60")
    assert get["headers"][TOKEN_HEADER.lower()] == tok and get["status"] == 200
    assert (failed["status"], failed["fault"]) == (500, "status")
    emu.clear_requests()
    assert emu.requests() == []


# -- as a subprocess --------------------------------------------------------------------

def test_subprocess_serves_streams_100mb_flat_and_stops_by_pid(
        metadata_emu: MetadataProcess) -> None:
    """The fixture's process serves, streams a 100 MB body without holding it, exits 0."""
    assert requests.get(metadata_emu.url + "/sco/v1/notice", timeout=5).status_code == 404
    size = 100 * 1024 * 1024
    process = psutil.Process(metadata_emu.pid)
    rss_before = process.memory_info().rss
    metadata_emu.fault("huge", size=size, count=1)
    parts = urlsplit(metadata_emu.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("GET", "/latest/meta-data/spot/instance-action")
    reply = conn.getresponse()
    assert int(reply.getheader("Content-Length")) == size
    total = sum(len(chunk) for chunk in iter(lambda: reply.read(1 << 20), b""))
    conn.close()
    assert total == size
    assert process.memory_info().rss - rss_before < 20 * 1024 * 1024
    assert metadata_emu.stop() == 0
    assert not psutil.pid_exists(metadata_emu.pid) or \
        psutil.Process(metadata_emu.pid).status() == psutil.STATUS_ZOMBIE


def test_command_line_rejects_unknown_provider() -> None:
    """A bad scenario on the command line is a clear error and exit status 2."""
    done = subprocess.run([sys.executable, "-m", "tests.emulators.metadata", "--providers",
                           "aws,ibm"], cwd=REPO_ROOT, capture_output=True, timeout=30, text=True,
                          check=False)
    assert done.returncode == 2
    assert "providers" in done.stderr

