"""The executor's side of ``extend`` (executor/clients.py) over a real socket: a grant holds the
client's own pod (``extended``), every grant is an event, refusals are events bounded by the
recorder, and a client whose pod cannot be told is refused before anything is held."""
from __future__ import annotations

import io
import time

import pytest

from common.log import Logger
from common.timefmt import format_rfc3339, parse_rfc3339
from executor import clients as clients_mod
from executor.agent_socket import AgentSocketServer
from executor.clients import Clients
from executor.socket_wire import MAX_ERRORS
from tests.support.agent_socket import RawClient, make_notice, wait_until

POD = "8dbc5577-d0e2-4706-8787-57d52c03ddf2"


@pytest.fixture
def served(sock_path, monkeypatch):
    """Clients over a listening server, served by hand; ``place`` says which pod a pid is in."""
    placement: dict[str, str | None] = {"pod": POD}
    monkeypatch.setattr(clients_mod.workload_map, "pod_uid_of_pid", lambda pid: placement["pod"])
    events: list[tuple[str, str, dict]] = []
    server = AgentSocketServer(sock_path, holdable=clients_mod.in_a_pod)
    server.listen()
    c = Clients(server, sock_path, Logger("test", stream=io.StringIO()),
                lambda type_, nid="", data=None, now=None: events.append((type_, nid, data or {})))
    yield c, events, placement
    c.close()


def pump(c: Clients, until, what: str):
    def step():
        c.serve(True, time.monotonic())
        return until()
    return wait_until(step, what=what)


def notice(limit_in: float = 30.0) -> dict:
    n = make_notice("n1", deadline_in=120, checkpoint_in=5)
    n["extend_limit"] = format_rfc3339(time.time() + limit_in)
    return n


def connect(c: Clients, sock_path: str) -> RawClient:
    raw = RawClient(sock_path)
    raw.send({"op": "register", "name": "trainer", "pid": 1})
    pump(c, lambda: c.server.stats().get("registered") == 1, "registration")
    return raw


def test_a_grant_holds_the_clients_pod_and_is_an_event(served, sock_path):
    c, events, _ = served
    raw = connect(c, sock_path)
    n = notice()
    c.announce(n)
    c.tell()
    raw.send({"op": "extend", "id": "n1", "seconds": 10})
    pump(c, lambda: events, "the grant event")
    reply = raw.read_op("extended")
    assert parse_rfc3339(reply["checkpoint_by"]) == pytest.approx(parse_rfc3339(n["checkpoint_by"]) + 10, abs=0.002)
    [(type_, nid, data)] = events
    assert (type_, nid, data["pod_uid"], data["asked_s"], data["client"]) == (
        "drain.checkpoint_extended", "n1", POD, 10, "trainer")
    assert c.extended() == {POD: pytest.approx(parse_rfc3339(reply["checkpoint_by"]))}
    raw.send({"op": "ack", "id": "n1", "status": "checkpointed"})
    pump(c, lambda: c.extended() == {}, "the ack releasing the hold")


def test_a_client_in_no_pod_is_refused_and_holds_nothing(served, sock_path):
    c, events, placement = served
    placement["pod"] = None
    raw = connect(c, sock_path)
    c.announce(notice())
    c.tell()
    raw.send({"op": "extend", "id": "n1", "seconds": 10})
    pump(c, lambda: events, "the refusal event")
    assert raw.read_op("error")["code"] == "extend_refused"
    [(type_, _, data)] = events
    assert type_ == "drain.extend_refused" and data["reason"] == "not_in_pod"
    assert c.extended() == {}


def test_a_flood_of_refusals_is_one_event_then_a_count(served, sock_path):
    """MAX_ERRORS refusals, then the connection is closed; the events: the first at once, the rest
    in one counted report (at stop here), never one per line."""
    c, events, _ = served
    raw = connect(c, sock_path)
    n = notice()
    n["extend_limit"] = n["checkpoint_by"]     # nothing grantable: checkpoint_by is the limit (the same
    c.announce(n)                              # text, not two readings of the clock a moment apart)
    c.tell()
    raw.send(b'{"op":"extend","id":"n1","seconds":5}\n' * (MAX_ERRORS + 10))
    pump(c, lambda: c.server.stats().get("closed.too_many_errors") == 1, "the connection closed")
    assert [(t, d["reason"], d.get("count")) for t, _, d in events] == [("drain.extend_refused", "at_limit", 1)]
    c.report_errors(force=True)
    refused = [(d.get("count"), d.get("total")) for t, _, d in events if t == "drain.extend_refused"]
    assert refused == [(1, 1), (MAX_ERRORS - 1, MAX_ERRORS)]
    # the closing is the socket's own refusal; the extends are not said twice
    assert [d["reason"] for t, _, d in events if t == "socket.rejected"] == ["too_many_errors"]
