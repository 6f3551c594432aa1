"""The spool's intake core: which messages are events, what is written, who is acknowledged."""
from __future__ import annotations

import json

import pytest
import ujson

from common import ipc
from common.events import Origin, make_event
from spool.intake import ACK_CHUNK, MAX_RECORD, OWN, Intake, Rejected, parse_event

SENDER = b"\x00sender-1"


def good(event_id: str = "e-1", **extra: object) -> dict:
    return {**make_event("drain.evicted", Origin("n", "h", "x"), 1), "event_id": event_id, **extra}


def frames(body: object, topic: bytes = ipc.T_EVENT) -> list[bytes]:
    return [SENDER, topic, body if isinstance(body, bytes) else json.dumps(body).encode()]


@pytest.mark.parametrize("msg", [
    [SENDER],                                                   # nothing after the identity
    [SENDER, b"event"],                                         # one frame
    [SENDER, b"event", b"{}", b"{}"],                           # three frames
    [SENDER, b"bogus", b"{}"],                                  # foreign topic
    frames(good(), ipc.T_ACK),                                  # one of ours, wrong socket
    frames(b"not json"),
    frames(b"\xff\xfe"),
    frames(b"[1, 2]"),                                          # JSON, not an object
    frames({"type": "drain.evicted"}),                          # no event_id
    frames({"event_id": 5, "type": "drain.evicted"}),
    frames({"event_id": "", "type": "drain.evicted"}),
    frames({"event_id": "x" * 129, "type": "drain.evicted"}),
    frames({"event_id": "e", "type": None}),
    frames(b'{"event_id": "e", "type": "t", "data": NaN}'),     # Vector's JSON has no NaN
    frames(b'{"event_id": "e", "type": "t", "data": 1e999}'),
    frames(b'{"event_id": "e", "type": "t", "data": "\\ud800"}'),  # a lone surrogate is not UTF-8
    frames(b"[" * 5000 + b"]" * 5000),
])
def test_garbage_is_rejected(msg: list[bytes]) -> None:
    """Anything but one storable event raises Rejected -- never another exception."""
    with pytest.raises(Rejected):
        parse_event(msg)


def test_an_event_becomes_one_line_of_json() -> None:
    """Pretty-printed input is re-encoded: an NDJSON batch can never be split by a newline."""
    ev = good(data={"path": "a/b", "text": "naïve\nline"})
    sender, event_id, payload = parse_event(frames(json.dumps(ev, indent=2).encode()))
    assert (sender, event_id) == (SENDER, "e-1")
    assert b"\n" not in payload
    assert ujson.loads(payload) == ev


def test_an_oversized_event_keeps_its_envelope_and_says_what_was_cut() -> None:
    ev = good(data={"blob": "x" * (MAX_RECORD + 10)})
    _, _, payload = parse_event(frames(ev))
    out = ujson.loads(payload)
    assert len(payload) <= MAX_RECORD
    assert {k: out[k] for k in ("event_id", "type", "seq", "node")} == \
        {k: ev[k] for k in ("event_id", "type", "seq", "node")}
    assert out["data"]["spool_truncated_bytes"] > MAX_RECORD


def test_an_event_too_large_even_without_data_is_rejected() -> None:
    with pytest.raises(Rejected):
        parse_event(frames(good(notice_id="n" * 2000)), limit=1000)


def test_a_round_is_written_once_and_acknowledged_to_each_sender() -> None:
    box = Intake()
    box.offer(b"a", "e1", b"1")
    box.offer(b"b", "e2", b"2")
    box.offer(b"a", "e3", b"3")
    assert box.batch() == [("e1", b"1"), ("e2", b"2"), ("e3", b"3")]
    assert box.take_acks() == []                      # nothing acknowledged before it is durable
    box.written(["e1", "e2", "e3"])
    assert sorted(box.take_acks()) == [(b"a", ["e1", "e3"]), (b"b", ["e2"])]
    assert box.batch() == []


def test_a_resend_of_a_durable_event_is_acknowledged_without_a_write() -> None:
    box = Intake()
    box.offer(b"a", "e1", b"1")
    box.written(["e1"])
    box.take_acks()
    box.offer(b"a2", "e1", b"1")                      # the sender restarted and resent it
    assert box.batch() == []
    assert box.take_acks() == [(b"a2", ["e1"])]
    assert box.resends == 1


def test_a_resend_while_held_is_one_record_acknowledged_to_both_senders() -> None:
    box = Intake()
    box.offer(b"a", "e1", b"1")
    box.offer(b"b", "e1", b"1")
    box.offer(b"b", "e1", b"1")
    assert box.batch() == [("e1", b"1")]
    box.written(["e1"])
    assert sorted(box.take_acks()) == [(b"a", ["e1"]), (b"b", ["e1"])]


def test_held_events_are_bounded_newest_kept_and_own_events_last_to_go() -> None:
    box = Intake(hold_limit=3)
    box.offer(OWN, "own", b"o")
    for i in range(5):
        box.offer(b"a", f"e{i}", b"x")
    assert [eid for eid, _ in box.batch()] == ["own", "e3", "e4"]
    assert box.let_go == 3
    box.written(["own", "e3", "e4"])
    assert box.take_acks() == [(b"a", ["e3", "e4"])]   # nobody to acknowledge for the spool's own


def test_recent_ids_are_bounded() -> None:
    box = Intake(recent_limit=2)
    for i in range(3):
        box.offer(b"a", f"e{i}", b"x")
    box.written(["e0", "e1", "e2"])
    assert box.recent == {"e1", "e2"}
    box.offer(b"a", "e0", b"x")                         # forgotten: written again, harmlessly
    assert box.batch() == [("e0", b"x")]


def test_acks_are_split_to_stay_under_the_message_limit() -> None:
    box = Intake(hold_limit=10**6)
    ids = [f"e{i}" for i in range(ACK_CHUNK * 2 + 1)]
    for eid in ids:
        box.offer(b"a", eid, b"x")
    box.written(ids)
    acks = box.take_acks()
    assert [len(chunk) for _, chunk in acks] == [ACK_CHUNK, ACK_CHUNK, 1]
    assert all(len(ipc.encode(ipc.T_ACK, {"ids": chunk})[1]) < ipc.MAX_MESSAGE for _, chunk in acks)


def test_refit_cuts_held_events_to_a_smaller_file_limit() -> None:
    box = Intake()
    _, eid, payload = parse_event(frames(good(data={"blob": "x" * 5000})))
    box.offer(b"a", eid, payload)
    box.refit(2000)
    [(_, cut)] = box.batch()
    assert len(cut) <= 2000 and ujson.loads(cut)["data"]["spool_truncated_bytes"] == len(payload)
