"""The spool process end to end: acknowledged means on disk, through garbage, SIGKILL, SIGTERM and a full file.

Each test runs ``python -m spool --config X`` itself (no supervisord) and
talks to it the way the agent does: a real SpoolLink (tests.spool.harness.Sender)
or, for garbage, a raw DEALER on the ipc socket.
"""
from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import zmq

from common import ipc
from common.config import load
from common.contract import BUILTIN
from common.events import Origin, make_event
from spool.reader import read_stats
from tests.emulators.vector import VectorEmulator
from tests.spool.harness import Sender, SpoolProcess, file_events, spool_config, spool_file
from tests.support.wait import wait_for


@pytest.fixture
def vec() -> Iterator[VectorEmulator]:
    with VectorEmulator(path="/events") as v:
        yield v


@pytest.fixture
def zctx() -> Iterator[zmq.Context]:
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def ids(events: Iterable[dict]) -> list[str]:
    return [e["event_id"] for e in events]


def recv_ack(sock: zmq.Socket, timeout_s: float = 5.0) -> list[str]:
    assert sock.poll(int(timeout_s * 1000)), "no acknowledgement"
    topic, body = ipc.decode(sock.recv_multipart())
    assert topic == ipc.T_ACK
    return body["ids"]


def an_event(event_id: str) -> dict:
    return {**make_event("drain.evicted", Origin("node-a", "h1", "raw"), 1), "event_id": event_id}


def test_garbage_on_the_intake_is_counted_and_a_good_event_still_acked(tmp_path: Path, zctx: zmq.Context) -> None:
    cfg = spool_config(tmp_path)
    junk = [
        [b"x"], [b"event"], [b"event", b"{}", b"{}"], [b"bogus", b"{}"], [b""], [b"\xff" * 64],
        [b"event", b"not json"], [b"event", b"[1]"], [b"event", b'{"no": "id"}'],
        [b"ack", b'{"ids": []}'], [b"event", b'{"event_id": 5, "type": "t"}'],
        [b"event", b'{"event_id": "e", "type": "t", "data": NaN}'],
        [b"event", b'{"event_id": "e", "type": "t", "data": "\\ud800"}'],
    ]
    with SpoolProcess(cfg) as sp:
        sock = ipc.connect(zctx, zmq.DEALER, str(tmp_path / "run"), ipc.SPOOL_INTAKE)
        for frames in junk:
            sock.send_multipart(frames)
        sock.send_multipart(ipc.encode(ipc.T_EVENT, an_event("good-1")))
        assert recv_ack(sock) == ["good-1"]
        # A message over the socket's size limit costs its sender the connection, nothing more.
        big = zctx.socket(zmq.DEALER)
        big.connect(ipc.endpoint(str(tmp_path / "run"), ipc.SPOOL_INTAKE))
        big.send_multipart([b"event", b"x" * (ipc.MAX_MESSAGE + 1)])
        sock.send_multipart(ipc.encode(ipc.T_EVENT, an_event("good-2")))
        assert recv_ack(sock) == ["good-2"]
        big.close(0)
        assert sp.alive()
        assert sp.stop() == 0
    events = file_events(cfg)
    assert ids(e for e in events if e["type"] != "ipc.rejected") == ["good-1", "good-2"]
    # Each report is also an event in the spool itself, with its reason and count.
    reported = [e["data"] for e in events if e["type"] == "ipc.rejected"]
    assert sum(d["count"] for d in reported) == len(junk) and all(d["reason"] for d in reported)
    [stopped] = sp.logged("process.stopped")
    assert stopped["rejected"] == len(junk)
    # Counted every time; logged at once per reason, then at most every 10 s (and at stop) with the
    # count since the last line.
    lines = sp.logged("ipc.rejected")
    assert {line["reason"] for line in lines} == {"frames", "topic", "bad_json", "not_object", "bad_shape",
                                                  "not_encodable"}
    assert sum(line["count"] for line in lines) == len(junk)


def test_a_resent_event_is_acknowledged_again_but_written_once(tmp_path: Path, zctx: zmq.Context) -> None:
    cfg = spool_config(tmp_path)
    with SpoolProcess(cfg) as sp:
        sock = ipc.connect(zctx, zmq.DEALER, str(tmp_path / "run"), ipc.SPOOL_INTAKE)
        for _ in range(3):
            sock.send_multipart(ipc.encode(ipc.T_EVENT, an_event("e-1")))
            assert recv_ack(sock) == ["e-1"]
        assert sp.stop() == 0
    assert ids(file_events(cfg)) == ["e-1"]


def test_sigkill_20_times_mid_stream_loses_no_acknowledged_event(tmp_path: Path, vec: VectorEmulator) -> None:
    """Every event acknowledged before each SIGKILL is in the file (or already in Vector), and all of them
    reach Vector."""
    rng = random.Random(20)
    cfg = spool_config(tmp_path, vector_url=vec.url)
    sp = SpoolProcess(cfg)
    try:
        with Sender(cfg, rate_hz=400) as tx:
            for _ in range(20):
                sp.start()
                tx.wait_acked(tx.acked_count() + 20)
                time.sleep(rng.uniform(0, 0.05))   # a random instant of the stream: mid-round or not
                assert sp.kill() == -signal.SIGKILL
                acked = set(tx.acked())
                # In the file, or shipped already: a slow run emits enough for the ring to lap, and a
                # record Vector has and the next lap overwrote is not lost.
                missing = acked - set(ids(file_events(cfg))) - set(ids(vec.records()))
                assert not missing, f"{len(missing)} acknowledged events neither in the file nor in Vector"
            sp.start()
            tx.set_rate(0)
            tx.wait_all_acked(15)
            emitted = tx.acked()
        assert len(emitted) > 20 * 20
        assert set(emitted) <= set(ids(file_events(cfg))) | set(ids(vec.records()))
        wait_for(lambda: set(emitted) <= set(ids(vec.records())), 15, "every event shipped")
        assert sp.stop() == 0
    finally:
        sp.stop()


def test_sigterm_exits_promptly_with_a_batch_in_flight_and_loses_nothing(tmp_path: Path, vec: VectorEmulator) -> None:
    vec.hang(60, batches=1)
    cfg = spool_config(tmp_path, vector_url=vec.url)
    sp = SpoolProcess(cfg).start()
    try:
        with Sender(cfg) as tx:
            tx.emit(50)
            tx.wait_all_acked()
            sent = tx.acked()
        wait_for(lambda: vec.faults() == [], 5, "the first batch hanging in Vector")
        sp.signal(signal.SIGTERM)
        assert sp.wait(timeout=8) == 0           # not after the 45 s ship timeout
        [stopped] = sp.logged("process.stopped")
        assert stopped["shipper_stopped"] is False
        assert read_stats(spool_file(cfg))["unshipped_records"] == 50
        sp.start()
        assert ids(vec.wait_for_records(50)) == sent
    finally:
        sp.stop()


def test_a_full_spool_drops_the_oldest_and_says_how_many(tmp_path: Path, vec: VectorEmulator) -> None:
    """Vector down, a 1 MiB file overflows: the oldest go, spool.dropped events say exactly how many;
    Vector back: everything the file kept arrives, in order, with those reports."""
    vec.refuse()
    cfg = spool_config(tmp_path, size_mb=1, vector_url=vec.url)
    with SpoolProcess(cfg) as sp, Sender(cfg) as tx:
        tx.emit(1500)                            # ~0.65 MB of ~430-byte records ...
        tx.wait_all_acked(20)
        tx.emit(1200)                            # ... then ~0.5 MB more: the oldest few hundred must go
        tx.wait_all_acked(20)
        sent = tx.acked()
        kept = [e["event_id"] for e in file_events(cfg, from_head=True) if e["type"] == "drain.evicted"]
        assert 0 < len(kept) < len(sent) and kept == sent[len(sent) - len(kept):]   # the newest, in order
        vec.accept()

        logged = sum(r["dropped"] for r in sp.logged("spool.dropped"))   # each drop, as it happened
        assert logged == len(sent) - len(kept)

        def delivered() -> list[dict] | None:
            # The last write's drops are recorded once shipping makes room for the report.
            got = vec.records()
            return got if sum(e["data"]["dropped"] for e in got if e["type"] == "spool.dropped") >= logged \
                and read_stats(spool_file(cfg))["unshipped_records"] == 0 else None

        got = wait_for(delivered, 15, "the file shipped, with reports of every drop")
        assert sp.stop() == 0
    drops = [e["data"] for e in got if e["type"] == "spool.dropped"]
    assert sum(d["dropped"] for d in drops) == len(sent) - len(kept)
    for d in drops:
        assert d["last_seq"] - d["first_seq"] + 1 == d["dropped"]
        assert d["first_ts"] <= d["last_ts"]
    # The batch the shipper held while Vector was away may still go out (at least once, never less).
    arrived = list(dict.fromkeys(e["event_id"] for e in got if e["type"] == "drain.evicted"))
    assert set(kept) <= set(arrived)
    order = {eid: i for i, eid in enumerate(sent)}
    assert [order[e] for e in arrived] == sorted(order[e] for e in arrived)
    assert sp.logged("spool.dropped")


def test_the_contracts_sink_url_is_where_events_go(tmp_path: Path, vec: VectorEmulator, zctx: zmq.Context) -> None:
    cfg = spool_config(tmp_path)                 # no vector_url of its own
    run_dir = load(str(cfg)).paths.runtime_dir
    ipc.ensure_runtime_dir(run_dir)
    pub = ipc.bind(zctx, zmq.PUB, run_dir, ipc.WATCHER_PUB)
    contract = {"source": "bundle", "contract": {**BUILTIN.to_dict(), "hall": "h1", "sink_url": vec.url}}
    with SpoolProcess(cfg) as sp, Sender(cfg) as tx:
        tx.emit(10)
        tx.wait_all_acked()

        def shipped() -> bool:
            pub.send_multipart([ipc.T_CONTRACT, b"{not json"])          # counted, ignored
            ipc.send(pub, ipc.T_CONTRACT, contract)                     # re-announced, as the watcher does
            return len(sent_by_tx()) >= 10

        def sent_by_tx() -> list[str]:   # the garbage is reported by an ipc.rejected event, shipped too
            return ids(r for r in vec.records() if r["type"] != "ipc.rejected")

        wait_for(shipped, 10, "events shipped to the contract's sink", interval=0.2)
        assert sent_by_tx() == tx.acked()
        assert sp.stop() == 0
    assert [r["url"] for r in sp.logged("ship.sink")] == [vec.url]
