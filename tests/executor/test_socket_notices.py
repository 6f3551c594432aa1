"""Several notices at once on the agent socket: which one governs (a pure function), and what the
protocol core tells each client as the set changes. Plain data and a fake clock, no sockets."""
from __future__ import annotations

import json

import pytest

from executor.socket_protocol import AgentProtocol
from executor.socket_wire import Ack, Send, governing_notice
from tests.support.agent_socket import make_notice

from .test_socket_protocol import lines, register


def notice(nid: str, deadline: str, checkpoint_by: str = "2026-11-29T11:00:00Z", kind: str = "reclaim") -> dict:
    return {"id": nid, "kind": kind, "deadline": deadline, "checkpoint_by": checkpoint_by}


def told_m_then_r() -> tuple[AgentProtocol, dict, dict]:
    """Client 1 told maintenance 'm' (deadline in 300 s), then reclaim 'r' (in 120 s) took over."""
    p = AgentProtocol()
    register(p, 1)
    m, r = make_notice("m", deadline_in=300, kind="maintenance"), make_notice("r", deadline_in=120)
    p.set_notices([m], 0.0)
    p.set_notices([m, r], 1.0)
    return p, m, r


def ack(p: AgentProtocol, conn: int, nid: str, now: float = 5.0) -> list:
    return p.receive(conn, json.dumps({"op": "ack", "id": nid, "status": "checkpointed"}).encode() + b"\n", now)


# -- governing_notice ---------------------------------------------------------------------------

def test_none_governs_when_nothing_drains():
    assert governing_notice([]) is None


def test_the_earliest_deadline_governs_whatever_the_order():
    late = notice("m-1", "2026-11-29T12:10:00Z", kind="maintenance")
    early = notice("r-1", "2026-11-29T12:02:00Z")
    assert governing_notice([late, early]) is early
    assert governing_notice([early, late]) is early


def test_deadlines_compare_as_times_not_text():
    """'12:00:03+01:00' is 11:00:03Z: earlier than '11:00:05Z' although it sorts later as text."""
    offset = notice("a", "2026-11-29T12:00:03+01:00")
    utc = notice("b", "2026-11-29T11:00:05Z")
    assert governing_notice([utc, offset]) is offset


def test_ties_go_to_the_earlier_checkpoint_by_then_the_smaller_id():
    d = "2026-11-29T12:02:00Z"
    x = notice("x", d, "2026-11-29T12:01:00Z")
    y = notice("y", d, "2026-11-29T12:00:30Z")
    assert governing_notice([x, y]) is y
    a, b = notice("a", d), notice("b", d)
    assert governing_notice([b, a]) is a and governing_notice([a, b]) is a


# -- the protocol with several notices --------------------------------------------------------

def test_each_client_is_told_the_governing_notice_once_across_many_turns():
    """The flapping of issue 17: two notices active, each loop turn passes both; one line only."""
    p = AgentProtocol()
    register(p, 1)
    maint, reclaim = make_notice("m", deadline_in=300, kind="maintenance"), make_notice("r", deadline_in=120)
    assert [m["id"] for m in lines(p.set_notices([maint], 0.0))] == ["m"]
    assert [m["id"] for m in lines(p.set_notices([maint, reclaim], 1.0))] == ["r"]   # it changed
    for turn in range(50):
        both = [maint, reclaim] if turn % 2 else [reclaim, maint]
        assert p.set_notices(both, 2.0 + turn) == []
    assert p.active_notice == reclaim
    assert {n["id"] for n in p.notices} == {"m", "r"}


def test_an_ack_for_any_told_and_active_notice_is_accepted():
    p, _m, _r = told_m_then_r()
    first = ack(p, 1, "m", 5.0)
    second = ack(p, 1, "r", 6.0)
    acks = [a for a in first + second if isinstance(a, Ack)]
    assert [(a.notice_id, a.latency_s) for a in acks] == [("m", 5.0), ("r", 5.0)]
    [info] = p.clients()
    assert (info.notice_id, info.acked, info.answered) == ("r", "checkpointed", frozenset({"m", "r"}))


def test_a_notice_never_told_is_refused_even_while_active():
    """Told only 'r' (it governed from the start): acking 'm' is not this client's to answer."""
    p = AgentProtocol()
    register(p, 1)
    p.set_notices([make_notice("m", deadline_in=300), make_notice("r", deadline_in=120)], 0.0)
    [reply] = lines(ack(p, 1, "m"))
    assert reply["code"] == "unknown_notice"


def test_a_notice_that_stops_draining_is_no_longer_ackable():
    p, _m, r = told_m_then_r()
    assert p.set_notices([r], 2.0) == []   # 'r' still governs: nothing to tell
    [reply] = lines(ack(p, 1, "m"))
    assert reply["code"] == "unknown_notice"


def test_withdrawing_the_governing_notice_says_so_then_tells_the_next():
    p = AgentProtocol()
    register(p, 1)
    m, r = make_notice("m", deadline_in=300), make_notice("r", deadline_in=120)
    p.set_notices([m, r], 0.0)
    assert lines(p.withdraw("r", 1.0)) == [{"op": "withdrawn", "id": "r"}, {"op": "notice", **m}]
    assert p.withdraw("r", 2.0) == []            # the drain core withdraws every turn: idempotent
    assert p.set_notices([m], 3.0) == []


def test_withdrawing_a_notice_that_governs_nobody_sends_nothing():
    p, _m, _r = told_m_then_r()
    assert p.withdraw("m", 2.0) == []            # told 'm' once, but 'r' governs it now
    [reply] = lines(ack(p, 1, "m"))
    assert reply["code"] == "unknown_notice"     # withdrawn: no longer active


def test_a_new_earlier_notice_takes_over_and_a_changed_deadline_is_resent_acks_standing():
    p = AgentProtocol()
    register(p, 1)
    m = make_notice("m", deadline_in=300)
    p.set_notices([m], 0.0)
    ack(p, 1, "m")
    moved = {**m, "deadline": make_notice("m", deadline_in=200)["deadline"]}
    [line] = lines(p.set_notices([moved], 6.0))
    assert line["deadline"] == moved["deadline"]
    [info] = p.clients()
    assert info.acked == "checkpointed"          # same id: the ack stands


def test_a_client_registering_late_gets_only_the_governing_notice():
    p = AgentProtocol()
    p.set_notices([make_notice("m", deadline_in=300), make_notice("r", deadline_in=120)], 0.0)
    sent = register(p, 7)
    assert [m["op"] for m in lines(sent)] == ["registered", "notice"]
    assert lines(sent)[1]["id"] == "r"


def test_a_malformed_notice_changes_nothing():
    p = AgentProtocol()
    register(p, 1)
    good = make_notice("r", deadline_in=120)
    p.set_notices([good], 0.0)
    with pytest.raises(ValueError):
        p.set_notices([good, {"id": "x", "kind": "reclaim", "deadline": "soon", "checkpoint_by": "soon"}], 1.0)
    assert p.active_notice == good and len(p.notices) == 1


def test_every_send_is_one_line():
    p = AgentProtocol()
    register(p, 1)
    register(p, 2)
    out = p.set_notices([make_notice("a", deadline_in=10), make_notice("b", deadline_in=20)], 0.0)
    assert all(isinstance(a, Send) and a.data.count(b"\n") == 1 for a in out) and len(out) == 2
