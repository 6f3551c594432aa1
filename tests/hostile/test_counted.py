"""Every refusal is counted with a reason and reported without flooding; no input silences a process."""
from __future__ import annotations

import asyncio
import io
import os
import signal
import time

import pytest
import ujson
import zmq

from common import ipc
from common.config import build
from common.log import Logger
from common.notice import Notice
from common.runtime import Rejections
from executor.__main__ import Executor
from tests.support.fuzzing import Feed
from watcher import __main__ as watcher_main
from watcher.__main__ import Watcher
from watcher.contract_verify import Rejected

NODE = "node-a"
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lines(stream: io.StringIO, msg: str) -> list[dict]:
    return [r for r in map(ujson.loads, stream.getvalue().splitlines()) if r["msg"] == msg]


def test_rejections_report_the_first_at_once_then_the_count_per_window():
    out, clock, emitted = io.StringIO(), Clock(), []
    r = Rejections(Logger("t", stream=out), emit=lambda t, data: emitted.append((t, data)), clock=clock)
    for _ in range(500):
        r.add("spool.intake", ipc.BadMessage("x", "bad_json"))
    r.add("spool.intake", ValueError("no reason attribute"))
    r.tick()                                  # still inside the window: nothing new said
    assert [(x["reason"], x["count"]) for x in lines(out, "ipc.rejected")] == [("bad_json", 1), ("bad_value", 1)]
    clock.now += 10
    r.tick()                                  # the window passed: what accumulated, once
    assert [(x["reason"], x["count"], x["total"]) for x in lines(out, "ipc.rejected")][-1] == ("bad_json", 499, 500)
    r.add("x", ipc.BadMessage("y", "topic"))
    r.tick(force=True)                        # at stop: nothing counted goes unsaid
    assert r.counts == {"ipc.rejected.bad_json": 500, "ipc.rejected.bad_value": 1, "ipc.rejected.topic": 1}
    assert r.total == 502 and sum(d["count"] for _, d in emitted) == 502
    assert {t for t, _ in emitted} == {"ipc.rejected"}


@pytest.fixture
def config(tmp_path):
    cfg = build({"node": {"name": NODE, "hall": "h1", "scheduler": "none"},
                 "paths": {"runtime_dir": str(tmp_path / "run"), "state_dir": str(tmp_path / "state")},
                 "agent_socket": {"path": str(tmp_path / "run" / "agent.sock")},
                 "metadata": {"provider": "none"}, "relay": {"servers": []},
                 "contract": {"trust_dir": str(tmp_path / "trust"), "launch_path": str(tmp_path / "x.json")}})
    ipc.ensure_runtime_dir(cfg.paths.runtime_dir)
    return cfg


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


def other_node(i: int) -> bytes:
    return ujson.dumps({"v": 1, "id": f"x-{i}", "kind": "reclaim", "node": "node-b",
                        "issued_at": "2026-11-29T12:00:00Z", "deadline": "2026-11-29T12:02:00Z"}).encode()


def test_a_flood_of_other_nodes_notices_is_counted_in_full_and_logged_once(config, ctx):
    """Found while flooding the relay: the 'once a minute' was per notice id, so 10,000 distinct
    ids made 10,000 log lines and 10,000 spool events. Now: once per reason, with the count."""
    out = io.StringIO()
    w = Watcher(config, Logger("watcher", stream=out), ctx)
    for i in range(1000):
        w.on_relay_payload(other_node(i), "sco.notice.h1.node-a")
    assert w.counters["ignored.reason.other_node"] == 1000 and w.counters["ignored.relay"] == 1000
    assert len(lines(out, "notice.ignored")) == 1
    assert sum(1 for _, ev in w.spool.outbox.pending.values() if ev["type"] == "notice.ignored") == 1
    # Found when the five flood guards became one recorder: the watcher never said what it had
    # counted after the first report. Now the stop says the rest: count since the last, and total.
    w.reports.tick(force=True)
    said = [ev["data"] for _, ev in w.spool.outbox.pending.values() if ev["type"] == "notice.ignored"]
    assert [(d["count"], d["total"]) for d in said] == [(1, 1), (999, 1000)]
    assert [(x["count"], x["total"]) for x in lines(out, "notice.ignored")] == [(1, 1), (999, 1000)]


def test_relay_drops_are_counted_apart_from_errors(config, ctx):
    out = io.StringIO()
    w = Watcher(config, Logger("watcher", stream=out), ctx)
    for _ in range(50):
        w.on_relay_status("slow_consumer", "SlowConsumerError: nats: slow consumer, messages dropped")
    assert w.counters["relay.slow_consumer"] == 50 and "relay.error" not in w.counters
    assert len(lines(out, "relay.slow_consumer")) == 1


def test_contract_rejections_reach_the_published_counters(config, ctx):
    """They were counted by the contract keeper but never published, so the verifier's
    sco_agent_rejections_total{what="contract"} stayed at zero."""
    w = Watcher(config, Logger("watcher", stream=io.StringIO()), ctx)
    w.contracts._rejected(Rejected("bad_signature", "x"), "url")
    w.contracts._rejected(Rejected("fetch_error:404", "x"), "url")
    counters = w.published_counters()
    assert counters["contract.rejected.bad_signature"] == 1
    assert counters["contract.rejected.fetch_error_404"] == 1   # ':' is no metric label character


def test_refused_key_files_are_counted_and_reported(config, ctx, tmp_path):
    (tmp_path / "trust").mkdir(mode=0o755)
    (tmp_path / "trust" / "junk.pub").write_bytes(b"not a key")
    w = Watcher(config, Logger("watcher", stream=io.StringIO()), ctx)
    assert w.published_counters()["contract.rejected.trust_problem"] == 1
    [ev] = [ev for _, ev in w.spool.outbox.pending.values() if ev["type"] == "contract.rejected"]
    assert ev["data"]["source"] == "trust_dir" and "junk.pub" in ev["data"]["detail"]


def test_one_bad_notice_record_does_not_hide_the_good_one(config, ctx):
    ex = Executor(config, Logger("executor", stream=io.StringIO()), ctx)
    good = Notice(id="n1", kind="reclaim", node=NODE, instance_id="", issued_at=T0, deadline=T0 + 120,
                  source="aws").to_dict()
    bad = dict(good, id="n2", received_at="nan")
    ex.sub.close()
    ex.sub = Feed([ipc.encode(ipc.T_NOTICE, {"active": [bad, good], "withdrawn": []})])
    ex.on_sub_readable()
    assert list(ex.drains.active) == ["n1"] and ex.rejections.counts == {"ipc.rejected.bad_value": 1}
    ex.close()


def test_a_watcher_loop_that_raises_runs_again_after_a_pause_and_each_restart_is_said(config, monkeypatch):
    """Issue 26, point 7. First the task died silently and the watcher lived on deaf or mute; then
    the watcher exited 1 for supervisord to start a fresh one -- which met the same input at once:
    a crash loop. Now the loop alone runs again, after 0.5 s then 1 s (common.supervise), each
    restart a log line and an event, and the watcher goes on."""
    calls = []

    async def broken(w, stop):
        calls.append(time.monotonic())
        if len(calls) <= 2:
            raise RuntimeError("an input nobody foresaw")
        os.kill(os.getpid(), signal.SIGTERM)   # the third run is fine: stop the watcher
        await stop.wait()

    monkeypatch.setattr(watcher_main, "tick_loop", broken)
    out = io.StringIO()
    assert asyncio.run(asyncio.wait_for(watcher_main.run(config, Logger("watcher", stream=out)), 20)) == 0
    said = lines(out, "agent.thread_restarted")
    assert [(r["thread"], r["restarts"], r["pause_s"]) for r in said] == [("tick_loop", 1, 0.5), ("tick_loop", 2, 1.0)]
    assert "RuntimeError: an input nobody foresaw" in said[0]["error"]
    assert calls[1] - calls[0] >= 0.5 and calls[2] - calls[1] >= 1.0
    assert not lines(out, "process.task_failed")


def test_agent_socket_refusals_are_reported(config, ctx):
    """They were counted inside the agent socket and never left it: no log line, no event."""
    import socket
    import time

    out = io.StringIO()
    ex = Executor(config, Logger("executor", stream=out), ctx)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(config.agent_socket.path)
    client.sendall(b"{not json\n" * 5 + b'{"op": "dance"}\n')
    deadline = time.monotonic() + 10
    while ex.clients.server.stats().get("error.unknown_op", 0) < 1 and time.monotonic() < deadline:
        ex.clients.serve(True, time.monotonic())
    ex.clients.report_errors()
    ex.clients.report_errors()   # nothing new: nothing said twice
    reported = [(r["reason"], r["count"]) for r in lines(out, "socket.rejected")]
    assert sorted(reported) == [("bad_json", 5), ("unknown_op", 1)]
    assert ex.clients.rejections.counts == {"socket.rejected.bad_json": 5, "socket.rejected.unknown_op": 1}
    events = [ev for _, ev in ex.spool.outbox.pending.values() if ev["type"] == "socket.rejected"]
    assert sum(ev["data"]["count"] for ev in events) == 6
    client.close()
    ex.close()
