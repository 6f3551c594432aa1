"""IPC framing rejects garbage; the outbox resends until acknowledged and stays bounded."""
from __future__ import annotations

import pytest

from common import ipc
from common.events import EVENT_TYPES, Origin, Outbox, make_event
from spool.shipping import Bisect


@pytest.mark.parametrize("frames", [
    [b"notice"], [b"bogus", b"{}"], [b"notice", b"not json"], [b"notice", b"[1]"],
    [b"notice", b"{}", b"extra"], [b"notice", b"\xff"],
])
def test_decode_rejects_garbage(frames):
    with pytest.raises(ipc.BadMessage):
        ipc.decode(frames)


def test_encode_decode_round_trip():
    assert ipc.decode(ipc.encode(ipc.T_NOTICE, {"a": [1]})) == (ipc.T_NOTICE, {"a": [1]})


def test_make_event_schema():
    ev = make_event("notice.received", Origin("n", "h", "w"), 3, notice_id="x", now=0.5)
    assert set(ev) == {"event_id", "seq", "ts", "node", "hall", "source", "type", "notice_id", "data"}
    assert (ev["node"], ev["hall"], ev["source"], ev["seq"]) == ("n", "h", "w", 3)
    assert ev["ts"] == "1970-01-01T00:00:00.500Z"
    with pytest.raises(ValueError):
        make_event("no.such", Origin("n", "h", "w"), 1)
    assert "drain.done" in EVENT_TYPES


def test_outbox_resends_until_acked():
    box = Outbox("w", "n", "h", resend_after_s=2.0, clock=lambda: 100.0)
    ev = box.add("notice.received", now=1_800_000_000.0)
    assert box.due(101.0) == []
    assert box.due(102.5) == [ev]
    assert box.due(103.0) == []            # clock restarted at the resend
    assert box.acked([ev["event_id"]]) == 1
    assert box.due(200.0) == []


def test_outbox_resends_on_its_monotonic_clock_whatever_the_events_wall_time():
    """The event's ts is the wall clock's; the resend pacing is an interval on the monotonic clock:
    an event stamped 60 s 'in the past' (the wall clock stepped back) is resent 2 s later, not 62."""
    mono = [500.0]
    box = Outbox("w", "n", "h", resend_after_s=2.0, clock=lambda: mono[0])
    first = box.add("notice.received", now=1_800_000_000.0)
    stepped = box.add("notice.received", now=1_800_000_000.0 - 60)
    assert first["ts"].startswith("2027-01-15T08:00:00") and box.due() == []
    mono[0] = 502.1
    assert box.due() == [first, stepped]


def test_outbox_is_bounded_and_reports_loss():
    box = Outbox("w", "n", "h", limit=3)
    for _ in range(5):
        box.add("notice.received", now=1.0)
    assert len(box.pending) == 3 and box.dropped == 2
    assert box.add("notice.received", now=2.0)["data"]["outbox_dropped"] == 2


@pytest.mark.parametrize("n,bad", [(1, {0}), (8, {5}), (9, {0, 8}), (16, set()), (7, {1, 2, 3})])
def test_bisect_finds_exactly_the_bad_records(n, bad):
    search = Bisect.of(n)
    delivered = set()
    while (r := search.next_range()) is not None:
        lo, hi = r
        ok = not (set(range(lo, hi)) & bad)
        if ok:
            delivered |= set(range(lo, hi))
        search.result(ok)
    if not bad:
        # A batch that was wrongly rejected as a whole is still delivered in pieces.
        assert delivered == set(range(n))
    else:
        assert set(search.bad) == bad
        assert delivered == set(range(n)) - bad
