"""AWS IMDSv2 as the emulator serves it: tokens, TTLs, notices, maintenance events."""
from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
import requests

from common.timefmt import parse_rfc3339
from tests.emulators._http import make_request
from tests.emulators.metadata import MetadataEmulator, aws
from tests.emulators.metadata.probe import (
    META,
    TOKEN_HEADER,
    TTL_HEADER,
    imds_get,
    imds_token,
)

MAINTENANCE_TIME = re.compile(r"^[1-9]\d? [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$")


def test_aws_token_put_returns_token_and_echoes_ttl(emu: MetadataEmulator) -> None:
    """PUT /latest/api/token answers the token as text and echoes the TTL header."""
    reply = requests.put(emu.url + "/latest/api/token", headers={TTL_HEADER: "21600"}, timeout=5)
    assert reply.status_code == 200
    assert reply.headers[TTL_HEADER] == "21600"
    assert len(reply.text) >= 40 and "\n" not in reply.text
    assert imds_get(emu.url, "instance-id", reply.text).status_code == 200


@pytest.mark.parametrize("ttl", [None, "0", "21601", "-5", "abc", "1.5", ""])
def test_aws_token_ttl_outside_range_is_400(emu: MetadataEmulator, ttl: str | None) -> None:
    """A missing, non-integer or out-of-range TTL (1..21600) is refused with 400."""
    headers = {TTL_HEADER: ttl} if ttl is not None else {}
    reply = requests.put(emu.url + "/latest/api/token", headers=headers, timeout=5)
    assert reply.status_code == 400
    assert "400 - Bad Request" in reply.text


def test_aws_token_via_proxy_is_403_and_get_on_token_path_is_405(emu: MetadataEmulator) -> None:
    """IMDS refuses token requests carrying X-Forwarded-For, and the token path is PUT-only."""
    reply = requests.put(emu.url + "/latest/api/token",
                         headers={TTL_HEADER: "60", "X-Forwarded-For": "10.0.0.1"}, timeout=5)
    assert reply.status_code == 403
    assert requests.get(emu.url + "/latest/api/token", timeout=5).status_code == 405


def test_aws_get_without_or_with_unknown_token_is_401(emu: MetadataEmulator) -> None:
    """IMDSv2 only: no token or a token the service never issued -> 401."""
    assert imds_get(emu.url, "instance-id", None).status_code == 401
    reply = imds_get(emu.url, "instance-id", "not-a-token")
    assert reply.status_code == 401
    assert "401 - Unauthorized" in reply.text


def test_aws_token_expires_after_its_ttl_on_the_emulator_clock(emu: MetadataEmulator) -> None:
    """A token works until its TTL has passed, then 401; fast-forwarding the clock does it."""
    tok = imds_token(emu.url, "60")
    emu.advance_clock(59)
    assert imds_get(emu.url, "instance-id", tok).status_code == 200
    emu.advance_clock(2)
    assert imds_get(emu.url, "instance-id", tok).status_code == 401
    assert imds_get(emu.url, "instance-id", imds_token(emu.url)).status_code == 200


def test_aws_max_ttl_shortens_granted_ttl(emu: MetadataEmulator) -> None:
    """With a TTL cap the echoed header is the granted TTL, and the token dies then."""
    emu.aws_max_ttl(5)
    reply = requests.put(emu.url + "/latest/api/token", headers={TTL_HEADER: "3600"}, timeout=5)
    assert reply.headers[TTL_HEADER] == "5"
    emu.advance_clock(6)
    assert imds_get(emu.url, "instance-id", reply.text).status_code == 401
    emu.aws_max_ttl(None)
    assert requests.put(emu.url + "/latest/api/token", headers={TTL_HEADER: "3600"},
                        timeout=5).headers[TTL_HEADER] == "3600"


def test_aws_invalidated_tokens_get_401_and_a_new_token_works(emu: MetadataEmulator) -> None:
    """The invalidation control makes the next GET 401 (for 'drop the token on 401')."""
    tok = imds_token(emu.url)
    emu.aws_invalidate_tokens()
    assert imds_get(emu.url, "instance-id", tok).status_code == 401
    assert imds_get(emu.url, "instance-id", imds_token(emu.url)).status_code == 200


def test_aws_imdsv1_serves_tokenless_gets_but_still_rejects_bad_tokens(
        emu: MetadataEmulator) -> None:
    """With IMDSv1 enabled a GET without a token is served; a bad token is still 401."""
    emu.aws_imdsv1(True)
    assert imds_get(emu.url, "instance-id", None).text == "i-0123456789abcdef0"
    assert imds_get(emu.url, "instance-id", "bogus").status_code == 401


def test_aws_instance_action_is_404_page_until_a_notice_then_json(emu: MetadataEmulator) -> None:
    """spot/instance-action: 404 with IMDS's '404 - Not Found' page, then the notice JSON."""
    tok = imds_token(emu.url)
    before = imds_get(emu.url, "spot/instance-action", tok)
    assert before.status_code == 404
    assert "<title>404 - Not Found</title>" in before.text
    assert imds_get(emu.url, "spot/termination-time", tok).status_code == 404
    now = emu.now()
    emu.aws_spot("stop", in_s=120)
    after = imds_get(emu.url, "spot/instance-action", tok)
    assert after.status_code == 200
    notice = after.json()
    assert set(notice) == {"action", "time"} and notice["action"] == "stop"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", notice["time"])
    assert abs(parse_rfc3339(notice["time"]) - (now + 120)) < 2
    assert imds_get(emu.url, "spot/termination-time", tok).text == notice["time"]
    emu.aws_clear_spot()
    assert imds_get(emu.url, "spot/instance-action", tok).status_code == 404


def test_aws_notice_time_is_stable_unless_drift_is_asked(emu: MetadataEmulator) -> None:
    """A notice keeps its time across polls; 'drift' re-creates AWS's mock pitfall."""
    tok = imds_token(emu.url)
    emu.aws_spot("terminate", in_s=120)
    first = imds_get(emu.url, "spot/instance-action", tok).json()
    emu.advance_clock(10)
    assert imds_get(emu.url, "spot/instance-action", tok).json() == first
    emu.aws_spot("terminate", in_s=120, drift=True)
    drifting = imds_get(emu.url, "spot/instance-action", tok).json()["time"]
    emu.advance_clock(10)
    later = imds_get(emu.url, "spot/instance-action", tok).json()["time"]
    assert parse_rfc3339(later) - parse_rfc3339(drifting) == pytest.approx(10, abs=1)


def test_aws_hibernate_has_no_termination_time(emu: MetadataEmulator) -> None:
    """termination-time is for stop/terminate only."""
    tok = imds_token(emu.url)
    emu.aws_spot("hibernate")
    assert imds_get(emu.url, "spot/instance-action", tok).json()["action"] == "hibernate"
    assert imds_get(emu.url, "spot/termination-time", tok).status_code == 404


def test_aws_rebalance_is_404_until_recommended(emu: MetadataEmulator) -> None:
    """events/recommendations/rebalance: 404, then {"noticeTime": ...}."""
    tok = imds_token(emu.url)
    assert imds_get(emu.url, "events/recommendations/rebalance", tok).status_code == 404
    emu.aws_rebalance(at="2020-10-16T19:18:24Z")
    reply = imds_get(emu.url, "events/recommendations/rebalance", tok)
    assert reply.json() == {"noticeTime": "2020-10-16T19:18:24Z"}


def test_aws_maintenance_events_layout_and_states(emu: MetadataEmulator) -> None:
    """Scheduled events carry the documented fields and time layout, then change state."""
    tok = imds_token(emu.url)
    assert imds_get(emu.url, "events/maintenance/scheduled", tok).json() == []
    event_id = emu.aws_maintenance_add("instance-stop", at="2020-01-01T01:03:47Z",
                                       duration_s=3600)
    [event] = imds_get(emu.url, "events/maintenance/scheduled", tok).json()
    assert set(event) == {"Code", "Description", "State", "EventId", "NotBefore", "NotAfter",
                          "NotBeforeDeadline"}
    assert event["Code"] == "instance-stop" and event["State"] == "active"
    assert event["EventId"] == event_id and re.fullmatch(r"instance-event-[0-9a-f]{17}", event_id)
    assert event["NotBefore"] == "1 Jan 2020 01:03:47 GMT"
    assert event["NotAfter"] == "1 Jan 2020 02:03:47 GMT"
    assert MAINTENANCE_TIME.match(event["NotBeforeDeadline"])
    assert imds_get(emu.url, "events/maintenance/history", tok).json() == []
    emu.aws_maintenance_state(event_id, "canceled")
    [canceled] = imds_get(emu.url, "events/maintenance/scheduled", tok).json()
    assert canceled["State"] == "canceled"
    assert canceled["Description"].startswith("[Canceled] ")
    emu.aws_maintenance_state(event_id, "completed")
    [history] = imds_get(emu.url, "events/maintenance/history", tok).json()
    assert history["State"] == "completed"
    assert history["Description"] == "[Completed] scheduled reboot"


def test_aws_identity_leaves(emu: MetadataEmulator) -> None:
    """instance-id and placement/availability-zone are plain text."""
    tok = imds_token(emu.url)
    reply = imds_get(emu.url, "instance-id", tok)
    assert reply.text == "i-0123456789abcdef0"
    assert reply.headers["Content-Type"] == "text/plain"
    assert imds_get(emu.url, "placement/availability-zone", tok).text == "us-east-1a"
    assert imds_get(emu.url, "no/such/leaf", tok).status_code == 404


def test_handler_is_pure_and_checks_the_token_against_the_given_clock() -> None:
    """aws.handle needs no socket: a token issued at t=0 with TTL 10 is refused at t=10."""
    state = aws.AwsState()
    issued = aws.handle(state, make_request("PUT", aws.TOKEN_PATH, {TTL_HEADER: "10"}), now=0.0)
    tok = issued.body.decode()
    leaf = make_request("GET", META + "instance-id", {TOKEN_HEADER: tok})
    assert aws.handle(state, leaf, now=9.9).status == 200
    assert aws.handle(state, leaf, now=10.0).status == 401


def test_maintenance_time_layout_matches_go_reference() -> None:
    """Go's reference time renders as '2 Jan 2006 15:04:05 GMT'."""
    reference = datetime(2006, 1, 2, 15, 4, 5, tzinfo=UTC).timestamp()
    assert aws.maintenance_time(reference) == "2 Jan 2006 15:04:05 GMT"
