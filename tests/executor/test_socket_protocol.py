"""The sans-I/O core, driven with bytes and a fake clock: no sockets."""
from __future__ import annotations

import json

import pytest

from executor.socket_protocol import AgentProtocol
from executor.socket_wire import (
    ERROR_CODES,
    MAX_ERRORS,
    MAX_LINE,
    Ack,
    ClientInfo,
    Close,
    Peer,
    Send,
)
from tests.support.agent_socket import make_notice

PEER = Peer(pid=100, uid=1000, gid=1000)


def lines(actions, conn=None) -> list[dict]:
    """Decoded messages of the Send actions (to ``conn`` if given)."""
    out = []
    for a in actions:
        if isinstance(a, Send) and (conn is None or a.conn == conn):
            assert a.data.endswith(b"\n") and a.data.count(b"\n") == 1
            out.append(json.loads(a.data))
    return out


def closes(actions) -> list[Close]:
    return [a for a in actions if isinstance(a, Close)]


def register(p: AgentProtocol, conn: int, name: str = "w", pid: int = 100, now: float = 0.0,
             peer: Peer = PEER) -> list:
    p.connect(conn, peer, now)
    return p.receive(conn, json.dumps({"op": "register", "name": name, "pid": pid}).encode() + b"\n", now)


def test_register_replies_with_client_id_and_kernel_credentials():
    """The reply carries a client id and the peer's SO_PEERCRED identity."""
    p = AgentProtocol()
    [reply] = lines(register(p, 1, name="trainer"))
    assert reply == {"op": "registered", "v": 1, "client": 1, "name": "trainer",
                     "pid": 100, "uid": 1000, "gid": 1000}
    assert p.stats()["registered"] == 1


def test_claimed_pid_that_is_not_the_peer_is_reported_not_trusted():
    """A client cannot register another process: the kernel's pid is recorded, the claim echoed."""
    p = AgentProtocol()
    [reply] = lines(register(p, 1, pid=4242))
    assert reply["pid"] == 100 and reply["claimed_pid"] == 4242
    assert p.stats()["pid_mismatch"] == 1


def test_second_register_on_a_connection_is_an_error():
    p = AgentProtocol()
    register(p, 1)
    actions = p.receive(1, b'{"op":"register","name":"x","pid":100}\n', 0.0)
    assert lines(actions)[0]["code"] == "already_registered"
    assert not closes(actions)


def test_notice_goes_to_registered_clients_only():
    """Unregistered connections hear nothing; each registered one gets exactly the notice fields."""
    p = AgentProtocol()
    register(p, 1)
    register(p, 2)
    p.connect(3, PEER, 0.0)
    notice = make_notice("n1")
    actions = p.announce(notice, 1.0)
    assert sorted(a.conn for a in actions) == [1, 2]
    assert lines(actions, 1) == [{"op": "notice", **notice}]


def test_register_while_a_notice_is_active_gets_it_at_once():
    p = AgentProtocol()
    p.announce(make_notice("n1"), 0.0)
    msgs = lines(register(p, 1))
    assert [m["op"] for m in msgs] == ["registered", "notice"]
    assert msgs[1]["id"] == "n1"


def test_reannouncing_the_same_notice_is_a_noop():
    """The watcher re-announces level-triggered; clients must not be flooded."""
    p = AgentProtocol()
    register(p, 1)
    notice = make_notice("n1")
    assert p.announce(notice, 0.0)
    assert p.announce(dict(notice), 1.0) == []


def test_ack_surfaces_with_credentials_and_latency():
    p = AgentProtocol()
    register(p, 1, name="trainer")
    p.announce(make_notice("n1"), 10.0)
    actions = p.receive(1, b'{"op":"ack","id":"n1","status":"checkpointed","detail":"step 7"}\n', 12.5)
    [ack] = [a for a in actions if isinstance(a, Ack)]
    assert ack == Ack(client=1, name="trainer", pid=100, uid=1000, gid=1000, notice_id="n1",
                      status="checkpointed", latency_s=2.5, detail="step 7", replay=False)
    assert lines(actions) == [{"op": "acked", "id": "n1", "status": "checkpointed"}]


def test_repeated_ack_is_answered_but_recorded_once():
    """First ack wins: a repeat gets the recorded status back and no second Ack event."""
    p = AgentProtocol()
    register(p, 1)
    p.announce(make_notice("n1"), 0.0)
    p.receive(1, b'{"op":"ack","id":"n1","status":"failed"}\n', 1.0)
    actions = p.receive(1, b'{"op":"ack","id":"n1","status":"checkpointed","replay":true}\n', 2.0)
    assert not [a for a in actions if isinstance(a, Ack)]
    assert lines(actions) == [{"op": "acked", "id": "n1", "status": "failed"}]


def test_ack_from_unregistered_connection_is_refused():
    p = AgentProtocol()
    p.announce(make_notice("n1"), 0.0)
    p.connect(1, PEER, 0.0)
    actions = p.receive(1, b'{"op":"ack","id":"n1","status":"checkpointed"}\n', 1.0)
    assert lines(actions)[0]["code"] == "not_registered"
    assert not [a for a in actions if isinstance(a, Ack)]


def test_ack_for_a_notice_this_client_was_not_sent_is_refused():
    """Client 2 registered after n1 was withdrawn: acking n1 is speaking for someone else."""
    p = AgentProtocol()
    register(p, 1)
    p.announce(make_notice("n1"), 0.0)
    p.withdraw("n1")
    p.announce(make_notice("n2"), 1.0)
    register(p, 2)
    for conn, nid in ((2, "n1"), (1, "n1"), (2, "nope")):
        msg = json.dumps({"op": "ack", "id": nid, "status": "checkpointed"}).encode() + b"\n"
        assert lines(p.receive(conn, msg, 2.0))[0]["code"] == "unknown_notice"
    assert p.stats()["error.unknown_notice"] == 3


def test_withdraw_tells_the_clients_that_were_sent_it():
    p = AgentProtocol()
    register(p, 1)
    p.announce(make_notice("n1"), 0.0)
    assert p.withdraw("other") == []
    assert lines(p.withdraw("n1")) == [{"op": "withdrawn", "id": "n1"}]
    assert p.active_notice is None


@pytest.mark.parametrize(("line", "code"), [
    (b"\xff\xfe garbage", "bad_json"),
    (b"{not json", "bad_json"),
    (b"[1,2,3]", "bad_message"),
    (b'{"name":"x"}', "bad_message"),
    (b'{"op":"launch"}', "unknown_op"),
    (b'{"op":"register","name":"","pid":1}', "bad_message"),
    (b'{"op":"register","name":"x","pid":true}', "bad_message"),
    (b'{"op":"register","name":"x","pid":-5}', "bad_message"),
    (b'{"op":"register","name":"\\ud800","pid":5}', "bad_message"),
    (b'{"op":"ack","id":"n1","status":"maybe"}', "bad_message"),
    (b"[" * 100000, "line_too_long"),
    (b"[" * 50000 + b"]" * 50000, "line_too_long"),
    (b"[" * 30000 + b"]" * 30000, "bad_json"),
])
def test_bad_lines_get_a_coded_error_and_are_counted(line, code):
    p = AgentProtocol()
    p.connect(1, PEER, 0.0)
    actions = p.receive(1, line + b"\n", 0.0)
    [msg] = lines(actions)
    assert msg["op"] == "error" and msg["code"] == code and msg["message"]
    assert p.stats()[f"error.{code}"] == 1
    assert bool(closes(actions)) == ERROR_CODES[code]


def test_line_split_across_reads_and_several_lines_in_one_read():
    p = AgentProtocol()
    p.connect(1, PEER, 0.0)
    assert p.receive(1, b'{"op":"pi', 0.0) == []
    actions = p.receive(1, b'ng"}\r\n\n{"op":"ping"}\n{"op":', 0.0)
    assert lines(actions) == [{"op": "pong"}, {"op": "pong"}]


def test_line_of_exactly_the_limit_is_accepted():
    p = AgentProtocol()
    p.connect(1, PEER, 0.0)
    line = b'{"op":"ping","pad":"' + b"x" * (MAX_LINE - 22) + b'"}'
    assert len(line) == MAX_LINE
    assert lines(p.receive(1, line + b"\n", 0.0)) == [{"op": "pong"}]


def test_oversized_partial_line_closes_before_the_newline_arrives():
    """A 1 MB line is refused after 64 KiB, not buffered whole."""
    p = AgentProtocol()
    p.connect(1, PEER, 0.0)
    assert p.receive(1, b"x" * MAX_LINE, 0.0) == []
    actions = p.receive(1, b"x", 0.0)
    assert lines(actions)[0]["code"] == "line_too_long"
    assert closes(actions) == [Close(1, "line_too_long")]
    assert p.receive(1, b"more", 0.0) == []  # forgotten


def test_too_many_errors_closes_the_connection():
    p = AgentProtocol()
    p.connect(1, PEER, 0.0)
    actions = p.receive(1, b"junk\n" * (MAX_ERRORS + 1), 0.0)
    assert [m["code"] for m in lines(actions)] == ["bad_json"] * MAX_ERRORS + ["too_many_errors"]
    assert closes(actions) == [Close(1, "too_many_errors")]


def test_connections_beyond_the_limit_are_refused_and_counted():
    p = AgentProtocol(max_clients=2)
    assert p.connect(1, PEER, 0.0) == []
    assert p.connect(2, PEER, 0.0) == []
    actions = p.connect(3, PEER, 0.0)
    assert lines(actions)[0]["code"] == "too_many_clients"
    assert closes(actions) == [Close(3, "too_many_clients")]
    p.disconnect(1, "peer_closed")
    assert p.connect(4, PEER, 0.0) == []
    assert p.stats()["error.too_many_clients"] == 1


def test_register_timeout_closes_silent_connections_only():
    p = AgentProtocol(register_timeout_s=5.0)
    p.connect(1, PEER, 0.0)
    register(p, 2, now=0.0)
    assert p.next_deadline() == 5.0
    assert p.tick(4.9) == []
    actions = p.tick(5.0)
    assert closes(actions) == [Close(1, "register_timeout")]
    assert p.next_deadline() is None  # a registered, quiet client has no timer: it may wait for days


def test_slowloris_partial_line_times_out_even_while_bytes_trickle():
    p = AgentProtocol(line_timeout_s=3.0)
    register(p, 1)
    for t in range(3):
        assert p.receive(1, b"{", float(t)) == []  # one byte a second
        assert p.tick(float(t)) == []
    assert p.next_deadline() == 3.0
    assert closes(p.tick(3.0)) == [Close(1, "line_timeout")]


def test_completed_line_stops_the_line_timer():
    p = AgentProtocol(line_timeout_s=3.0)
    register(p, 1)
    p.receive(1, b'{"op":', 0.0)
    p.receive(1, b'"ping"}\n{"op"', 2.0)  # the first line ends, a new one starts at t=2
    assert p.next_deadline() == 5.0
    assert p.tick(4.0) == []


def test_announce_rejects_a_malformed_notice():
    p = AgentProtocol()
    with pytest.raises(ValueError):
        p.announce({"id": "n1", "kind": "reclaim", "deadline": "soon", "checkpoint_by": "soon"}, 0.0)
    with pytest.raises(ValueError):
        p.announce({**make_notice("n1"), "id": ""}, 0.0)


def test_clients_show_who_has_answered_the_active_notice():
    """What the drain needs to finish the checkpoint phase early: every registered client answered."""
    p = AgentProtocol()
    register(p, 1, name="a")
    register(p, 2, name="b", peer=Peer(pid=200, uid=0, gid=0))
    p.connect(3, PEER, 0.0)  # unregistered: not a client
    p.announce(make_notice("n1"), 0.0)
    p.receive(1, b'{"op":"ack","id":"n1","status":"checkpointed"}\n', 1.0)
    assert p.clients() == [ClientInfo(1, "a", 100, 1000, 1000, "n1", "checkpointed", frozenset({"n1"})),
                           ClientInfo(2, "b", 200, 0, 0, "n1", None)]
    p.withdraw("n1")
    assert [(c.notice_id, c.acked) for c in p.clients()] == [(None, None), (None, None)]
