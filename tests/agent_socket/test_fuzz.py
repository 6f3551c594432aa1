"""Hypothesis fuzz of the framing and validation core: any bytes, any split, never a crash."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from executor.socket_protocol import AgentProtocol
from executor.socket_wire import (
    ERROR_CODES,
    MAX_LINE,
    Ack,
    Close,
    Peer,
    Send,
)
from tests.agent_socket.harness import make_notice
from tests.fuzzing import fuzz

PEER = Peer(pid=7, uid=0, gid=0)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
messages = st.fixed_dictionaries(
    {"op": st.sampled_from(["register", "ack", "ping", "nope", ""])},
    optional={"name": json_values | st.text(max_size=10), "pid": json_values | st.integers(),
              "id": json_values | st.just("n1"), "status": st.sampled_from(["checkpointed", "failed", "x"]),
              "detail": json_values, "replay": json_values},
)
lines = st.one_of(
    messages.map(lambda m: json.dumps(m).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"")),
)


def check_actions(actions: list, open_conns: set[int]) -> None:
    for a in actions:
        if isinstance(a, Send):
            assert a.data.endswith(b"\n") and a.data.count(b"\n") == 1
            msg = json.loads(a.data)
            assert isinstance(msg, dict) and isinstance(msg["op"], str)
            if msg["op"] == "error":
                assert msg["code"] in ERROR_CODES
        elif isinstance(a, Close):
            open_conns.discard(a.conn)
        else:
            assert isinstance(a, Ack) and a.status in ("checkpointed", "failed")


@fuzz(120)
@given(chunks=st.lists(st.tuples(st.integers(1, 3), lines, st.booleans(), st.integers(0, 40)), max_size=25),
       notice_first=st.booleans())
def test_any_byte_stream_yields_only_well_formed_actions(chunks, notice_first):
    """Random lines, cut at random points, on three connections: replies are always valid
    protocol lines with known error codes, and the counters account for every connection."""
    p = AgentProtocol(max_clients=3)
    if notice_first:
        p.announce(make_notice("n1"), 0.0)
    open_conns = {1, 2, 3}
    for conn in open_conns:
        assert p.connect(conn, PEER, 0.0) == []
    now = 0.0
    for conn, line, newline, cut in chunks:
        now += 0.1
        data = line + (b"\n" if newline else b"")
        for part in (data[:cut], data[cut:]):
            check_actions(p.receive(conn, part, now), open_conns)
        if not notice_first and now > 1.0:
            check_actions(p.announce(make_notice("n1"), now), open_conns)
    stats = p.stats()
    assert stats["open"] == len(open_conns)
    assert stats["registered"] <= stats["open"]


@fuzz(50)
@given(size=st.integers(MAX_LINE - 2, MAX_LINE + 2), piece=st.integers(1, 70000))
def test_line_limit_holds_however_the_bytes_are_split(size, piece):
    """A line longer than the limit is always refused; one within it never is."""
    p = AgentProtocol()
    p.connect(1, PEER, 0.0)
    data = b" " * size + b"\n"
    actions = []
    for i in range(0, len(data), piece):
        actions += p.receive(1, data[i:i + piece], 0.0)
    refused = any(isinstance(a, Close) for a in actions)
    assert refused == (size > MAX_LINE)
