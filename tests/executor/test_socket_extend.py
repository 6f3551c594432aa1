"""``extend`` on the sans-I/O core (DESIGN section 6): the grant is capped at
``deadline - evict_s - margin_s``, made against the notice that governs the client, every
grant and refusal is an ``Extension`` action, and a flood of them at the line limit costs the
agent one bounded connection."""
from __future__ import annotations

import json

import pytest

from common.timefmt import format_rfc3339, parse_rfc3339
from common.wire import Budget
from executor import extension
from executor.socket_protocol import AgentProtocol
from executor.socket_wire import MAX_ERRORS, MAX_EXTENDS, MAX_LINE, Close, Extension, Peer, Send

PEER = Peer(pid=100, uid=1000, gid=1000)
T0 = parse_rfc3339("2026-11-29T12:00:00Z")


def at(offset_s: float) -> str:
    return format_rfc3339(T0 + offset_s)


def notice(nid: str = "n1", deadline_s: float = 120, checkpoint_s: float = 40, limit_s: float | None = 60,
           kind: str = "reclaim") -> dict:
    n = {"id": nid, "kind": kind, "deadline": at(deadline_s), "checkpoint_by": at(checkpoint_s)}
    if limit_s is not None:
        n["extend_limit"] = at(limit_s)
    return n


def lines(actions, conn=None) -> list[dict]:
    return [json.loads(a.data) for a in actions if isinstance(a, Send) and (conn is None or a.conn == conn)]


def outcomes(actions) -> list[Extension]:
    return [a for a in actions if isinstance(a, Extension)]


def register(p: AgentProtocol, conn: int, holdable: bool = True) -> list:
    p.connect(conn, PEER, 0.0, holdable)
    return p.receive(conn, b'{"op":"register","name":"w","pid":100}\n', 0.0)


def extend(p: AgentProtocol, conn: int, nid: str, seconds: object) -> list:
    return p.receive(conn, json.dumps({"op": "extend", "id": nid, "seconds": seconds}).encode() + b"\n", 1.0)


def told(*notices: dict, holdable: bool = True) -> AgentProtocol:
    p = AgentProtocol()
    register(p, 1, holdable)
    p.set_notices(list(notices), 0.0)
    return p


# -- the rule ---------------------------------------------------------------------------

def test_the_limit_leaves_the_whole_evict_phase_and_margin_before_the_deadline():
    assert extension.extend_limit(1000.0, Budget(100, 40, 50, 10)) == 940.0


@pytest.mark.parametrize(("current", "asked", "limit", "granted"), [
    (40_000, 10, 60_000, 50_000),    # all of it
    (40_000, 30, 60_000, 60_000),    # capped: less than asked
    (60_000, 5, 60_000, None),       # at the limit: nothing
    (70_000, 5, 60_000, None),       # past it (the limit moved): nothing
    (40_000, 0, 60_000, None),
])
def test_grant_is_capped_and_never_negative(current, asked, limit, granted):
    assert extension.grant(current, asked, limit) == granted


# -- the protocol -----------------------------------------------------------------------

def test_a_grant_answers_the_new_checkpoint_by_and_is_an_extension_action():
    p = told(notice())
    actions = extend(p, 1, "n1", 10)
    assert lines(actions) == [{"op": "extended", "id": "n1", "checkpoint_by": at(50)}]
    [ext] = outcomes(actions)
    assert (ext.notice_id, ext.asked_s, ext.checkpoint_by, ext.reason) == ("n1", 10, at(50), "")
    [info] = p.clients()
    assert info.extended_until == T0 + 50


def test_more_than_the_budget_allows_gets_the_limit_and_the_answer_counts():
    p = told(notice(limit_s=60))
    assert lines(extend(p, 1, "n1", 3600)) == [{"op": "extended", "id": "n1", "checkpoint_by": at(60)}]


def test_extending_repeatedly_adds_up_and_never_passes_the_cap():
    p = told(notice(checkpoint_s=40, limit_s=60))
    granted = []
    for _ in range(8):
        reply = lines(extend(p, 1, "n1", 7))[0]
        if reply["op"] == "error":
            assert reply["code"] == "extend_refused" and reply["message"].startswith("at_limit")
            break
        granted.append(reply["checkpoint_by"])
    assert granted == [at(47), at(54), at(60)]
    assert p.clients()[0].extended_until == T0 + 60


def test_nothing_grantable_is_refused():
    """checkpoint_by already at the limit (the contract's budget has no slack)."""
    p = told(notice(checkpoint_s=60, limit_s=60))
    actions = extend(p, 1, "n1", 5)
    [reply] = lines(actions)
    assert reply["op"] == "error" and reply["code"] == "extend_refused"
    [ext] = outcomes(actions)
    assert ext.reason == "at_limit" and ext.checkpoint_by == ""
    assert p.clients()[0].extended_until is None


@pytest.mark.parametrize(("setup", "nid", "reason"), [
    ("none", "n1", "unknown_notice"),         # nothing drains
    ("one", "n9", "unknown_notice"),          # never told
    ("withdrawn", "n1", "unknown_notice"),    # withdrawn since
    ("ended", "n1", "unknown_notice"),        # no longer announced (its drain ended)
    ("acked", "n1", "answered"),
    ("no_limit", "n1", "no_budget"),
])
def test_refusals(setup, nid, reason):
    p = AgentProtocol()
    register(p, 1)
    if setup != "none":
        p.set_notices([notice(limit_s=None if setup == "no_limit" else 60)], 0.0)
    if setup == "withdrawn":
        p.withdraw("n1", 0.5)
    if setup == "ended":
        p.set_notices([], 0.5)
    if setup == "acked":
        p.receive(1, b'{"op":"ack","id":"n1","status":"checkpointed"}\n', 0.5)
    actions = extend(p, 1, nid, 5)
    [reply] = lines(actions)
    assert reply["code"] == "extend_refused" and reply["message"].startswith(reason)
    assert [e.reason for e in outcomes(actions)] == [reason]
    assert p.stats()["error.extend_refused"] == 1


def test_a_client_whose_pod_cannot_be_told_gets_nothing():
    """Its grant could only hold every pod (or none): refused, so no other workload waits for it."""
    p = told(notice(), holdable=False)
    [reply] = lines(extend(p, 1, "n1", 5))
    assert reply["message"].startswith("not_in_pod")


@pytest.mark.parametrize("seconds", [0, -1, 1.5, "10", True, None, 86401])
def test_a_malformed_extend_is_bad_message_not_a_refusal(seconds):
    p = told(notice())
    actions = extend(p, 1, "n1", seconds)
    assert lines(actions)[0]["code"] == "bad_message"
    assert not outcomes(actions)


def test_extend_before_register_is_refused_as_such():
    p = AgentProtocol()
    p.connect(1, PEER, 0.0)
    p.set_notices([notice()], 0.0)
    assert lines(extend(p, 1, "n1", 5))[0]["code"] == "not_registered"


# -- several notices --------------------------------------------------------------------

def test_with_several_notices_the_grant_is_against_the_governing_one():
    """A maintenance far away and a reclaim soon: the client is told the reclaim (earliest deadline),
    and its grant is capped by the reclaim's limit, not the maintenance's."""
    maintenance = notice("m", deadline_s=86400, checkpoint_s=40, limit_s=86300, kind="maintenance")
    reclaim = notice("r", deadline_s=120, checkpoint_s=40, limit_s=60)
    p = told(maintenance, reclaim)
    assert lines(extend(p, 1, "r", 600)) == [{"op": "extended", "id": "r", "checkpoint_by": at(60)}]
    # "m" is active but does not govern this client: refused, with the reason.
    [reply] = lines(extend(p, 1, "m", 600))
    assert reply["message"].startswith("unknown_notice")   # never told: the reclaim came first


def test_a_notice_told_earlier_that_no_longer_governs_is_refused_and_its_grant_goes():
    """Told the maintenance, granted on it; a reclaim takes over: extending the maintenance is
    refused (not_governing), and the live grant is the reclaim's (none yet), not the old one."""
    maintenance = notice("m", deadline_s=3600, checkpoint_s=40, limit_s=3500, kind="maintenance")
    p = told(maintenance)
    assert lines(extend(p, 1, "m", 1000))[0]["checkpoint_by"] == at(1040)
    reclaim = notice("r", deadline_s=120, checkpoint_s=40, limit_s=60)
    p.set_notices([maintenance, reclaim], 2.0)
    assert p.clients()[0].notice_id == "r" and p.clients()[0].extended_until is None
    [reply] = lines(extend(p, 1, "m", 10))
    assert reply["message"].startswith("not_governing")
    assert lines(extend(p, 1, "r", 10))[0]["checkpoint_by"] == at(50)


def test_withdrawing_the_governing_notice_ends_its_grant():
    maintenance = notice("m", deadline_s=3600, limit_s=3500, kind="maintenance")
    reclaim = notice("r", deadline_s=120, limit_s=60)
    p = told(maintenance, reclaim)
    extend(p, 1, "r", 10)
    p.withdraw("r", 2.0)
    assert p.clients()[0].notice_id == "m" and p.clients()[0].extended_until is None


def test_a_limit_that_moves_earlier_cuts_a_grant_to_it():
    p = told(notice(deadline_s=120, limit_s=60))
    extend(p, 1, "n1", 20)
    p.set_notices([notice(deadline_s=110, limit_s=55)], 2.0)
    assert p.clients()[0].extended_until == T0 + 55


def test_the_ack_releases_the_grant():
    p = told(notice())
    extend(p, 1, "n1", 10)
    p.receive(1, b'{"op":"ack","id":"n1","status":"checkpointed"}\n', 2.0)
    assert p.clients()[0].extended_until is None


def test_grants_are_per_connection():
    p = told(notice())
    register(p, 2)
    p.set_notices([notice()], 0.5)
    extend(p, 1, "n1", 10)
    by_conn = {c.client: c.extended_until for c in p.clients()}
    assert by_conn == {1: T0 + 50, 2: None}


# -- floods -----------------------------------------------------------------------------

def test_grants_per_notice_are_bounded():
    p = told(notice(checkpoint_s=0, limit_s=3600))
    replies = [lines(extend(p, 1, "n1", 1))[0] for _ in range(MAX_EXTENDS + 1)]
    assert all(r["op"] == "extended" for r in replies[:MAX_EXTENDS])
    assert replies[-1]["message"].startswith("too_many")
    assert p.clients()[0].extended_until == T0 + MAX_EXTENDS


def test_a_flood_of_refused_extends_closes_the_connection_after_max_errors():
    """Refusals are error replies: one client sending them without end is cut off."""
    p = told(notice(checkpoint_s=60, limit_s=60))
    line = b'{"op":"extend","id":"n1","seconds":5}\n'
    actions = p.receive(1, line * (MAX_ERRORS + 5), 1.0)
    assert len(outcomes(actions)) == MAX_ERRORS
    [close] = [a for a in actions if isinstance(a, Close)]
    assert close.reason == "too_many_errors"
    assert p.clients() == []


def test_extends_at_the_line_limit_are_read_and_one_past_it_closes():
    """A line of exactly MAX_LINE bytes (padding in an ignored field) is an extend like any other."""
    p = told(notice(checkpoint_s=0, limit_s=3600))
    head = b'{"op":"extend","id":"n1","seconds":1,"pad":"'
    line = head + b"x" * (MAX_LINE - len(head) - 2) + b'"}'
    assert len(line) == MAX_LINE
    actions = p.receive(1, (line + b"\n") * 10, 1.0)
    assert [r["op"] for r in lines(actions)] == ["extended"] * 10
    assert p.clients()[0].extended_until == T0 + 10
    actions = p.receive(1, line + b"xx\n", 1.0)
    assert lines(actions)[0]["code"] == "line_too_long"
    assert p.clients() == []
