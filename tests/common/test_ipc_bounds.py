"""With real zmq sockets: a message larger than its receivers accept is refused by the sender and
counted, and a connection the receiving socket drops is noticed and counted.

What libzmq does with an oversized message, modelled here by doing it: the receiving socket's
ZMQ_MAXMSGSIZE "Limits the size of the inbound message. If a peer sends a message larger than
ZMQ_MAXMSGSIZE it is disconnected" (libzmq doc/zmq_setsockopt.txt); the sender's send succeeds, and
only a socket monitor hears ``ZMQ_EVENT_DISCONNECTED`` ("The socket was disconnected unexpectedly",
doc/zmq_socket_monitor.txt).
"""
from __future__ import annotations

import io
import json
import threading
import time

import pytest
import zmq

from common import ipc
from common.log import Logger
from common.runtime import Rejections

BIG = {"ids": ["x" * 1000] * 300}   # about 300 KB encoded: over ipc.MAX_MESSAGE


@pytest.fixture
def pair(tmp_path):
    """A PUB bound in a fresh runtime dir and a SUB connected to it, both made by common.ipc."""
    run = ipc.ensure_runtime_dir(str(tmp_path / "run"))
    ctx: ipc.Context = zmq.Context()
    pub = ipc.bind(ctx, zmq.PUB, run, ipc.WATCHER_PUB)
    sub = ipc.subscriber(ctx, run, ipc.WATCHER_PUB, ipc.T_NOTICE)
    try:
        yield run, pub, sub
    finally:
        ctx.destroy(linger=0)


def heard(pub: ipc.Socket, sub: ipc.Socket, body: dict, within_s: float = 5.0) -> bool:
    """Send ``body`` until the SUB gets it (a SUB joins a moment after it connects)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        ipc.send(pub, ipc.T_NOTICE, body)
        if sub.poll(100):
            return ipc.decode(sub.recv_multipart())[1] == body
    return False


def test_an_oversized_send_is_refused_counted_and_logged_and_the_receiver_stays_connected(pair):
    run, pub, sub = pair
    disconnects = ipc.Disconnects(run, {ipc.WATCHER_PUB: sub})
    assert heard(pub, sub, {"n": 0})
    log = io.StringIO()
    rejections = Rejections(Logger("watcher", stream=log))
    assert ipc.send(pub, ipc.T_NOTICE, BIG, lambda e: rejections.add(ipc.WATCHER_PUB, e)) is False
    assert rejections.counts == {"ipc.rejected.send_too_large": 1}
    said = [json.loads(line) for line in log.getvalue().splitlines()]
    assert [(s["msg"], s["reason"]) for s in said] == [("ipc.rejected", "send_too_large")]
    # Nothing reached the socket: the receiver is still connected and hears the next message at once.
    ipc.send(pub, ipc.T_NOTICE, {"n": 1})
    assert sub.poll(2000) and ipc.decode(sub.recv_multipart())[1] == {"n": 1}
    time.sleep(0.2)
    assert disconnects.take() == {}
    with pytest.raises(ipc.TooLarge):   # no one to count it: said loudly all the same
        ipc.send(pub, ipc.T_NOTICE, BIG)


def test_libzmq_leaves_a_sub_dropped_for_an_oversized_message_deaf(pair):
    """Why ``Disconnects`` connects again: an oversized message is a protocol error, and libzmq does
    not reconnect after one (src/session_base.cpp engine_error). Issue 26's deaf executor."""
    _, pub, sub = pair
    assert heard(pub, sub, {"n": 0})
    pub.send_multipart([ipc.T_NOTICE, b"{" + b" " * ipc.MAX_MESSAGE + b"}"])
    assert not heard(pub, sub, {"n": 1}, within_s=3.0)


def test_a_connection_the_receiver_drops_is_noticed_counted_and_made_again(pair):
    """What an oversized message did before the sender refused one (issue 26): sent past
    ``ipc.send``, it makes the receiving socket drop the connection; the monitor counts it, and the
    socket is connected again."""
    run, pub, sub = pair
    disconnects = ipc.Disconnects(run, {ipc.WATCHER_PUB: sub})
    assert heard(pub, sub, {"n": 0})
    pub.send_multipart([ipc.T_NOTICE, b"{" + b" " * ipc.MAX_MESSAGE + b"}"])   # libzmq: sent
    log = io.StringIO()
    rejections = Rejections(Logger("executor", stream=log))
    end = time.monotonic() + 5
    while time.monotonic() < end and not rejections.counts:
        sub.poll(100)
        rejections.count_disconnects(disconnects)
    assert rejections.counts == {"ipc.rejected.peer_disconnected": 1}
    said = json.loads(log.getvalue().splitlines()[0])
    assert (said["msg"], said["reason"], said["socket"]) == ("ipc.rejected", "peer_disconnected", ipc.WATCHER_PUB)
    with pytest.raises(zmq.Again):
        sub.recv_multipart(zmq.NOBLOCK)   # the oversized message never arrived
    assert heard(pub, sub, {"n": 2})      # connected again: a message within the limit is heard


def test_each_sender_counts_a_refused_message_where_its_counters_go(tmp_path, monkeypatch):
    """The watcher's refusal is in the counters it publishes (the verifier's metrics textfile reads
    them: sco_agent_rejections_total{what="ipc"}), the verifier's go into that textfile itself, the
    executor's are its ``ipc.rejected`` counts (log line and event, as its other refusals). The limit is
    made small so a real message is over it."""
    from common.config import build
    from executor.__main__ import Executor
    from tests.watcher.conftest import make_config
    from verifier.__main__ import Verifier
    from watcher.__main__ import Watcher

    run, state = tmp_path / "run", tmp_path / "state"
    run.mkdir(mode=0o700)
    ctx: ipc.Context = zmq.Context()
    try:
        w = Watcher(make_config(paths={"runtime_dir": str(run), "state_dir": str(state)},
                                contract={"trust_dir": str(tmp_path / "trust"),
                                          "launch_path": str(tmp_path / "none.json")}),
                    Logger("watcher", stream=io.StringIO()), ctx)
        w.spool.emit = lambda *a, **k: {}
        config = build({"node": {"name": "node-a", "scheduler": "none"},
                        "paths": {"runtime_dir": str(run), "state_dir": str(state)},
                        "agent_socket": {"path": str(run / "agent.sock")}})
        ex = Executor(config, Logger("executor", stream=io.StringIO()), ctx)
        v = Verifier(config, Logger("verifier", stream=io.StringIO()), ctx)
        monkeypatch.setattr(ipc, "MAX_MESSAGE", 10)
        w.announce()
        assert w.published_counters()["ipc.rejected.send_too_large"] == 2      # contract and notice state
        ex.publish()
        assert ex.rejections.counts == {"ipc.rejected.send_too_large": 1}
        v.publish()
        assert v.rejections.counts == {"ipc.rejected.send_too_large": 2}      # escalations and verdicts
        v.metrics_path = str(tmp_path / "sco.prom")
        v.write_metrics()
        prom = (tmp_path / "sco.prom").read_text()
        assert 'sco_agent_rejections_total{what="ipc",reason="send_too_large"} 2' in prom
        ex.close()
    finally:
        ctx.destroy(linger=0)


def test_a_process_ends_with_its_monitors_stopped_and_its_context_gone(tmp_path):
    """``ipc.destroy``: the monitor is stopped before its socket closes (libzmq #2083, #3575), every
    socket is closed and the context ended, within the bound."""
    run = ipc.ensure_runtime_dir(str(tmp_path / "run"))
    ctx: ipc.Context = zmq.Context()
    pub = ipc.bind(ctx, zmq.PUB, run, ipc.WATCHER_PUB)
    sub = ipc.subscriber(ctx, run, ipc.WATCHER_PUB, ipc.T_NOTICE)
    disconnects = ipc.Disconnects(run, {ipc.WATCHER_PUB: sub})
    monitor = disconnects.fds()[0]
    out = io.StringIO()
    assert ipc.destroy(ctx, Logger("test", stream=out), disconnects)
    assert monitor.closed and sub.closed and pub.closed and ctx.closed
    assert disconnects.fds() == [] and out.getvalue() == ""


def test_a_context_libzmq_never_lets_go_of_does_not_hold_the_process(tmp_path, monkeypatch):
    """What a unit stop met (tests/chaos, a verifier SIGKILLed after TimeoutStopSec): zmq_ctx_term
    blocking for good. Played by a term that never returns; the process's end goes on, and says so."""
    ctx: ipc.Context = zmq.Context()
    forever = threading.Event()
    monkeypatch.setattr(ctx, "destroy", lambda linger=None: forever.wait())
    out = io.StringIO()
    assert not ipc.destroy(ctx, Logger("test", stream=out), timeout_s=0.2)
    assert json.loads(out.getvalue())["msg"] == "ipc.term_timeout"
    forever.set()
    ctx.term()
