"""AWS IMDSv2: the documented payloads, the token's life, and partial failures (emulator in-process)."""
from __future__ import annotations

import pytest
import ujson

from common.timefmt import parse_rfc3339
from tests.watcher.conftest import make_config
from watcher.providers import MetadataError, aws
from watcher.providers.aws import Source, parse_instance_action, parse_maintenance, parse_rebalance

INSTANCE = "i-0123456789abcdef0"


@pytest.mark.parametrize("action", ["terminate", "stop", "hibernate"])
def test_instance_action_is_a_reclaim(action):
    body = b'{"action": "%s", "time": "2020-04-24T17:11:44Z"}' % action.encode()
    n = parse_instance_action(body, "node-a", INSTANCE, now=5.0)
    assert (n.kind, n.detail, n.source, n.channel) == ("reclaim", action, "aws", "metadata")
    assert n.deadline == parse_rfc3339("2020-04-24T17:11:44Z") and n.deadline - n.issued_at == 120
    assert n.id == parse_instance_action(body, "node-a", INSTANCE, now=99.0).id   # stable


@pytest.mark.parametrize("body", [b"", b"404 - Not Found", b'{"action": "reboot", "time": "2020-04-24T17:11:44Z"}',
                                  b'{"action": "stop"}', b'{"action": "stop", "time": "yesterday"}', b"[]"])
def test_bad_instance_action_is_refused(body):
    with pytest.raises(MetadataError) as e:
        parse_instance_action(body, "node-a", INSTANCE, now=0.0)
    assert e.value.reason == "bad_body"


def test_rebalance_is_its_own_kind():
    n = parse_rebalance(b'{"noticeTime": "2020-10-16T19:18:24Z"}', "node-a", INSTANCE, now=0.0)
    assert n.kind == "rebalance" and n.issued_at == parse_rfc3339("2020-10-16T19:18:24Z")
    assert n.deadline == n.issued_at + 120


@pytest.mark.parametrize("code,kind", [("instance-stop", "maintenance"), ("instance-retirement", "maintenance"),
                                       ("instance-reboot", "maintenance"), ("system-reboot", "maintenance"),
                                       ("system-maintenance", "pause"), ("a-code-aws-adds-later", "maintenance")])
def test_each_scheduled_event_code_maps_to_what_aws_says_it_does(code, kind):
    body = ujson.dumps([{"Code": code, "State": "active", "EventId": "instance-event-1",
                         "NotBefore": "1 Jan 2030 01:03:47 GMT"}]).encode()
    (n,), _ = parse_maintenance(body, "node-a", INSTANCE, now=0.0)
    assert (n.kind, n.detail) == (kind, code)


def test_maintenance_active_and_ended():
    body = (b'[{"Code": "system-reboot", "Description": "scheduled reboot", "State": "active",'
            b' "EventId": "instance-event-1", "NotBefore": "1 Jan 2030 01:03:47 GMT",'
            b' "NotAfter": "1 Jan 2030 03:03:47 GMT", "NotBeforeDeadline": "8 Jan 2030 01:03:47 GMT"},'
            b' {"Code": "instance-stop", "Description": "[Canceled] stop", "State": "canceled",'
            b' "EventId": "instance-event-2", "NotBefore": "21 Jan 2030 01:03:47 GMT"}]')
    notices, ended = parse_maintenance(body, "node-a", INSTANCE, now=0.0)
    assert [(n.kind, n.detail, n.deadline) for n in notices] == [
        ("maintenance", "system-reboot", parse_rfc3339("2030-01-01T01:03:47Z"))]
    assert len(ended) == 1 and ended[0] != notices[0].id and ended[0].startswith("aws-")


@pytest.mark.parametrize("body", [b"{}", b'[{"State": "active"}]', b'[1]',
                                  b'[{"Code": "x", "State": "active", "EventId": "e", "NotBefore": "2030-01-01T00:00:00Z"}]',
                                  b'[{"Code": "x", "State": "paused", "EventId": "e", "NotBefore": "1 Jan 2030 01:03:47 GMT"}]'])
def test_bad_maintenance_is_refused(body):
    with pytest.raises(MetadataError):
        parse_maintenance(body, "node-a", INSTANCE, now=0.0)


def source(emu, **metadata) -> Source:
    return Source(make_config("aws", emu.url, metadata=metadata))


def test_no_notice_means_an_empty_poll(emu):
    r = source(emu).poll(emu.now())
    assert r.notices == [] and r.withdrawn == [] and r.errors == []


def test_spot_notice_is_seen_once_and_is_stable(emu):
    src = source(emu)
    emu.aws_spot("stop", in_s=120)
    a, b = src.poll(emu.now()), src.poll(emu.now() + 5)
    assert [n.detail for n in a.notices] == ["stop"] and a.notices[0].id == b.notices[0].id
    assert a.notices[0].instance_id == INSTANCE   # learned from the instance-id document


def test_drifting_time_is_latched_to_the_first(emu):
    """AWS's own mock gives a new time on every read: still one notice."""
    src = source(emu)
    emu.aws_spot("terminate", in_s=120, drift=True)
    first = src.poll(emu.now()).notices[0]
    emu.advance_clock(7)
    assert src.poll(emu.now()).notices[0] == first


def test_an_earlier_time_replaces_the_latch(emu):
    src = source(emu)
    emu.aws_spot("terminate", in_s=120)
    first = src.poll(emu.now()).notices[0]
    emu.aws_spot("terminate", in_s=60)
    second = src.poll(emu.now()).notices[0]
    assert second.deadline < first.deadline and second.id != first.id


def test_rebalance_and_maintenance_lifecycle(emu):
    src = source(emu)
    emu.aws_rebalance()
    event = emu.aws_maintenance_add("system-reboot", in_s=3600)
    r = src.poll(emu.now())
    kinds = sorted(n.kind for n in r.notices)
    assert kinds == ["maintenance", "rebalance"]
    maintenance = next(n for n in r.notices if n.kind == "maintenance")
    assert abs(maintenance.deadline - (emu.now() + 3600)) < 3
    emu.aws_maintenance_state(event, "canceled")
    r = src.poll(emu.now())
    assert maintenance.id in r.withdrawn and [n.kind for n in r.notices] == ["rebalance"]


def test_maintenance_that_vanishes_is_withdrawn(emu):
    src = source(emu)
    event = emu.aws_maintenance_add("instance-reboot", in_s=600)
    held = src.poll(emu.now()).notices[0]
    emu.aws_maintenance_remove(event)
    assert src.poll(emu.now()).withdrawn == [held.id]
    assert src.poll(emu.now()).withdrawn == []


def test_maintenance_resumes_after_a_restart(emu):
    """A restarted watcher still withdraws the event it announced before."""
    event = emu.aws_maintenance_add("system-reboot", in_s=600)
    held = source(emu).poll(emu.now()).notices[0]
    emu.aws_maintenance_remove(event)
    again = source(emu)
    again.resume([held])
    assert again.poll(emu.now()).withdrawn == [held.id]


def token_requests(emu) -> int:
    return sum(1 for r in emu.requests(aws.TOKEN_PATH) if r["method"] == "PUT")


def test_token_is_reused_then_renewed_before_the_granted_ttl(emu):
    """AWS may grant less than asked: renewal follows the granted TTL, before it runs out."""
    emu.aws_max_ttl(20)
    src = source(emu)
    mono = [1000.0]
    src.mono = lambda: mono[0]     # the TTL is timed on the monotonic clock
    t0 = emu.now()
    src.poll(t0)
    mono[0] += 5
    src.poll(t0 - 60)              # the wall clock stepped back: the token is still the same one
    assert token_requests(emu) == 1
    emu.advance_clock(16)          # 4 s before the granted TTL ends on the emulator's clock
    mono[0] += 11
    src.poll(t0 - 60 + 11)
    assert token_requests(emu) == 2
    assert not [r for r in emu.requests("/latest/meta-data") if r["status"] == 401]


def test_a_refused_token_is_dropped_and_replaced(emu):
    src = source(emu)
    src.poll(emu.now())
    emu.aws_invalidate_tokens()
    emu.aws_spot("terminate")
    assert [n.detail for n in src.poll(emu.now()).notices] == ["terminate"]
    assert token_requests(emu) == 2


def test_no_imdsv1_unless_configured(emu):
    emu.aws_imdsv1(True)
    emu.fault("status", path=aws.TOKEN_PATH, status=403)
    with pytest.raises(MetadataError) as e:
        source(emu).poll(emu.now())
    assert e.value.reason == "http_403"
    assert not list(emu.requests("/latest/meta-data"))    # nothing asked without a token
    emu.aws_spot("terminate")
    assert source(emu, allow_imdsv1=True).poll(emu.now()).notices[0].detail == "terminate"


def test_a_broken_document_does_not_hide_the_interruption(emu):
    emu.aws_spot("terminate")
    emu.fault("garbage", path=aws.MAINTENANCE)
    r = source(emu).poll(emu.now())
    assert [n.detail for n in r.notices] == ["terminate"]
    assert [e.reason for e in r.errors] == ["bad_body"]


def test_oversized_body_is_refused_unread(emu):
    emu.fault("huge", path=aws.INSTANCE_ACTION, size=10 << 20)
    r = source(emu, max_body=4096).poll(emu.now())
    assert [e.reason for e in r.errors] == ["too_large"]


def test_service_down_is_a_metadata_error(emu):
    emu.down()
    with pytest.raises(MetadataError) as e:
        source(emu).poll(emu.now())
    assert e.value.reason in ("refused", "error", "timeout")
