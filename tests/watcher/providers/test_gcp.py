"""GCP: preemption and host maintenance, the Metadata-Flavor header, the long-poll and its floor."""
from __future__ import annotations

import contextlib
import threading

import pytest

from common.contract import BUILTIN
from tests.support.wait import wait_for
from tests.watcher.conftest import make_config
from watcher.providers import MetadataError, gcp
from watcher.providers.gcp import Source, parse_maintenance_event, parse_preempted


def test_pure_values():
    assert parse_preempted("TRUE") is True and parse_preempted("FALSE\n") is False
    assert parse_maintenance_event("MIGRATE_ON_HOST_MAINTENANCE") == "MIGRATE_ON_HOST_MAINTENANCE"
    for bad in ("true", "", "<html>"):
        with pytest.raises(MetadataError):
            parse_preempted(bad)
    with pytest.raises(MetadataError):
        parse_maintenance_event("REBOOT_NOW")


def source(emu, wake=None) -> Source:
    return Source(make_config("gcp", emu.url), wake=wake)


def test_preemption_gives_thirty_seconds_from_first_sight(emu):
    src = source(emu)
    assert src.poll(100.0).notices == []
    emu.gcp_set(preempted=True)
    first = src.poll(200.0).notices
    later = src.poll(205.0).notices
    assert [(n.kind, n.deadline, n.detail) for n in first] == [("reclaim", 230.0, "preempted")]
    assert later == first and first[0].instance_id == "4520031799277581759"
    assert all(r["headers"].get("metadata-flavor") == "Google" for r in emu.requests("/computeMetadata"))


@pytest.mark.parametrize("event", gcp.MAINTENANCE_EVENTS)
def test_maintenance_then_none_withdraws(emu, event):
    src = source(emu)
    emu.gcp_set(maintenance_event=event)
    held = src.poll(100.0).notices
    assert [(n.kind, n.detail, n.deadline) for n in held] == [(gcp.MAINTENANCE_KINDS[event], event, 160.0)]
    assert src.poll(105.0).notices == held
    emu.gcp_set(maintenance_event="NONE")
    r = src.poll(110.0)
    assert r.withdrawn == [held[0].id] and r.notices == []
    emu.gcp_set(maintenance_event=event)           # the next event is another notice
    assert src.poll(300.0).notices[0].id != held[0].id


def test_the_kind_is_what_google_says_the_event_does():
    """A live migration keeps the VM running (the built-in contract ignores it); a terminate stops it."""
    assert gcp.MAINTENANCE_KINDS == {"MIGRATE_ON_HOST_MAINTENANCE": "live_migration",
                                     "TERMINATE_ON_HOST_MAINTENANCE": "maintenance"}
    assert BUILTIN.action_for("live_migration") == "ignore" and BUILTIN.action_for("maintenance") == "drain"


def test_resumed_maintenance_is_withdrawn_after_a_restart(emu):
    emu.gcp_set(maintenance_event="MIGRATE_ON_HOST_MAINTENANCE")
    held = source(emu).poll(100.0).notices[0]
    again = source(emu)
    again.resume([held])
    assert again.poll(150.0).notices == [held]
    emu.gcp_set(maintenance_event="NONE")
    assert again.poll(151.0).withdrawn == [held.id]


def test_long_poll_wakes_on_a_change_without_a_poll(emu):
    woke = threading.Event()
    src = source(emu, wake=woke.set)
    try:
        src.poll(emu.now())                             # starts the long-poll threads
        wait_for(lambda: emu.gcp_waiters() == 2, 5, "both keys parked on wait_for_change")
        woke.clear()
        emu.gcp_set(preempted=True)
        assert woke.wait(5), "the long-poll did not wake the watcher"
        assert [n.kind for n in src.poll(emu.now()).notices] == ["reclaim"]
        waits = [r["query"] for r in emu.requests(gcp.PREFIX + gcp.PREEMPTED) if r["query"].get("wait_for_change")]
        assert waits and all(q.get("last_etag") and q.get("timeout_sec") for q in waits)
    finally:
        src.close()


def test_plain_poll_is_the_floor_when_long_poll_is_silent(emu):
    """A long-poll that never reports (here: told to stop) costs latency, never the notice."""
    woke = threading.Event()
    src = source(emu, wake=woke.set)
    try:
        src.poll(emu.now())
        wait_for(lambda: emu.gcp_waiters() == 2, 5, "both keys parked")
        for lp in src.long_polls.values():
            lp.stop()
        woke.clear()
        emu.gcp_set(preempted=True)
        assert [n.kind for n in src.poll(emu.now()).notices] == ["reclaim"]
        assert not woke.is_set()
    finally:
        src.close()


def test_long_poll_recovers_after_errors(emu):
    """The long-poll thread retries after failures and is parked again once the service answers."""
    emu.fault("status", path=gcp.PREFIX + gcp.MAINTENANCE, status=503, count=3)
    src = source(emu, wake=lambda: None)
    try:
        with contextlib.suppress(MetadataError):
            src.poll(emu.now())
        wait_for(lambda: emu.gcp_waiters() == 2, 10, "both keys parked after the errors")
    finally:
        src.close()


def test_parked_long_poll_answers_when_a_plain_read_fails(emu):
    woke = threading.Event()
    src = source(emu, wake=woke.set)
    try:
        emu.gcp_set(maintenance_event="TERMINATE_ON_HOST_MAINTENANCE")
        src.poll(emu.now())
        wait_for(lambda: emu.gcp_waiters() == 2, 5, "both keys parked")
        emu.fault("status", path="/computeMetadata/v1/instance/maintenance-event", status=500, count=1)
        r = src.poll(emu.now())
        assert [n.detail for n in r.notices] == ["TERMINATE_ON_HOST_MAINTENANCE"] and not r.errors
    finally:
        src.close()


def test_missing_header_answer_is_an_error(emu):
    emu.fault("status", path="/computeMetadata", status=403)
    with pytest.raises(MetadataError) as e:
        source(emu).poll(0.0)
    assert e.value.reason == "http_403"


def test_a_long_poll_that_dies_of_an_unexpected_exception_runs_again_and_forgets_its_value():
    """Issue 26, point 7: the thread used to end for good, keeping the last value it had. Now it is
    restarted (counted), its value forgotten meanwhile, and it reads again on a fresh connection."""
    from common.http import Response

    class Http:
        calls = closes = 0

        def request(self, method, path, headers=None, timeout_s=None):
            Http.calls += 1
            if Http.calls == 2:
                raise UnicodeError("a bug nobody foresaw")
            if Http.calls > 3:
                threading.Event().wait(0.05)   # a long poll: the server holds an unchanged value
            return Response(200, {"etag": "e1" if Http.calls == 1 else "e2"}, b"NONE" if Http.calls == 1 else b"TRUE")

        def close(self):
            Http.closes += 1

    woke = threading.Event()
    lp = gcp.LongPoll(Http(), gcp.PREEMPTED, woke.set, 1.0).start()   # type: ignore[arg-type]
    try:
        wait_for(lambda: lp.worker.restarts == 1, 10, "the restart")
        assert lp.errors >= 1
        wait_for(lambda: lp.value == "TRUE", 10, "a read after the restart")
        assert Http.closes >= 1 and woke.is_set()
    finally:
        lp.stop()
