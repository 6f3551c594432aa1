"""The spool when the disk refuses: events held and unacknowledged, one report per episode, written on recovery.

The tmpfs test runs the real process on a 256 KiB filesystem (root only; it
is skipped, saying why, where mounting is not permitted). The others drive
the Spool object in this process, round by round, with a failing fdatasync
injected into its ring and a fake clock, so every branch is reached without
waiting.
"""
from __future__ import annotations

import contextlib
import errno
import io
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ujson
import zmq

from common import ipc
from common.config import load
from common.events import Origin, make_event
from common.log import Logger
from spool.__main__ import RETRY_S, Spool
from spool.reader import iter_records
from spool.ring import SpoolIOError, SpoolRing
from tests.spool.harness import Sender, SpoolProcess, file_events, spool_config
from tests.support.ci import cannot_run
from tests.support.wait import wait_for


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(disk)],
                       check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        cannot_run(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): {e}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True, timeout=10)


def test_disk_full_holds_events_and_writes_them_when_space_returns(tmp_path: Path, small_disk: Path) -> None:
    """A 1 MiB spool cannot even be created on 256 KiB: no crash, no ack; grow the disk and all are written."""
    cfg = spool_config(tmp_path, state_dir=small_disk / "state", size_mb=1)
    with SpoolProcess(cfg) as sp, Sender(cfg) as tx:
        tx.emit(50)
        wait_for(lambda: sp.logged("spool.io_error"), 10, "the I/O error reported")
        since = time.monotonic()

        def held_through_retries() -> bool:
            assert sp.alive() and tx.acked_count() == 0
            return time.monotonic() - since > 3.5 * RETRY_S

        wait_for(held_through_retries, 10, "several retries with nothing acknowledged")
        subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True, timeout=10)
        tx.wait_all_acked(10)
        sent = tx.acked()
        assert sp.stop() == 0
    events = file_events(cfg)
    assert [e["event_id"] for e in events if e["type"] == "drain.evicted"] == sent
    [io_event] = [e for e in events if e["type"] == "spool.io_error"]
    assert io_event["data"]["errno"] == errno.ENOSPC
    assert len(sp.logged("spool.io_error")) == 1        # once per episode, not per attempt
    [recovered] = sp.logged("spool.io_recovered")
    assert recovered["attempts"] >= 3


# -- in-process: a failing fdatasync ---------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[Spool, zmq.Socket, Clock, io.StringIO]]:
    cfg = load(str(spool_config(tmp_path)))
    ipc.ensure_runtime_dir(cfg.paths.runtime_dir)
    ctx = zmq.Context()
    clock, out = Clock(), io.StringIO()
    spool = Spool(cfg, Logger("spool", stream=out), ctx, clock=clock)
    sender = ipc.connect(ctx, zmq.DEALER, cfg.paths.runtime_dir, ipc.SPOOL_INTAKE)
    try:
        yield spool, sender, clock, out
    finally:
        with contextlib.suppress(SpoolIOError):   # a test may leave its fault injected
            spool.store.close()
        ctx.destroy(linger=0)


def send(sock: zmq.Socket, event_id: str) -> None:
    ipc.send(sock, ipc.T_EVENT, {**make_event("drain.evicted", Origin("n", "h", "t"), 1), "event_id": event_id})


def acks(sock: zmq.Socket) -> list[str]:
    out: list[str] = []
    while sock.poll(50):
        out += ipc.decode(sock.recv_multipart())[1]["ids"]
    return out


def log_lines(out: io.StringIO, msg: str) -> list[dict]:
    return [r for r in map(ujson.loads, out.getvalue().splitlines()) if r["msg"] == msg]


def fail_syncs(spool: Spool, times: int) -> list[int]:
    """Make the ring's next ``times`` fdatasyncs fail with EIO; the returned list counts the calls."""
    ring = spool.store.ring
    assert ring is not None
    real, calls = ring.sync, []

    def sync() -> None:
        calls.append(1)
        if len(calls) <= times:
            raise SpoolIOError(errno.EIO, "spool fdatasync failed: Input/output error", "spool.dat")
        real()

    ring.sync = sync  # type: ignore[method-assign]
    return calls


def written(spool: Spool) -> list[str]:
    """Every record in the file, oldest first: the event_id of a sent event, the type of the spool's own."""
    out = []
    for rec in iter_records(spool.store.path, from_head=False):
        e = ujson.loads(rec.payload)
        out.append(e["type"] if e["type"].startswith("spool.") else e["event_id"])
    return out


def test_a_failed_fdatasync_is_not_acked_and_everything_since_is_appended_again(rig) -> None:
    spool, sock, clock, out = rig
    calls = fail_syncs(spool, times=3)
    send(sock, "a")
    spool.round(1000)
    assert acks(sock) == []                      # appended, but not durable: no ack
    send(sock, "b")
    send(sock, "a")                              # the sender resends meanwhile: still one record held
    spool.round(1000)
    assert len(calls) == 1                       # not retried before RETRY_S
    for _ in range(2):
        clock.now += RETRY_S
        spool.round(0)
    assert len(calls) == 3 and acks(sock) == []
    clock.now += RETRY_S
    spool.round(0)
    assert sorted(acks(sock)) == ["a", "b"]
    spool.store.close()
    # Each attempt appends everything since the last good sync again; the spool's one
    # io_error event joins from the next round on. Duplicates are harmless (event ids).
    assert written(spool) == ["a"] + ["a", "b", "spool.io_error"] * 3
    ids = {ujson.loads(r.payload)["event_id"] for r in iter_records(spool.store.path, from_head=False)}
    assert len(ids) == 3                         # one io_error event for the whole episode
    assert len(log_lines(out, "spool.io_error")) == 1
    [rec] = log_lines(out, "spool.io_recovered")
    assert rec["attempts"] == 3


def test_events_already_durable_are_acked_even_while_the_disk_fails(rig) -> None:
    spool, sock, clock, _ = rig
    send(sock, "a")
    spool.round(1000)
    assert acks(sock) == ["a"]
    fail_syncs(spool, times=100)
    send(sock, "b")
    spool.round(1000)
    send(sock, "a")                              # a resend of a durable event: ack from memory
    clock.now += RETRY_S
    spool.round(1000)
    assert acks(sock) == ["a"]


def test_shutdown_writes_the_spools_own_queued_events(rig) -> None:
    """SIGTERM's flush: what the shipper reported a moment ago is written before the file closes."""
    spool, sock, _, out = rig
    spool.store.report("spool.ship_rejected", {"seq": 7, "bytes": 3, "record_prefix": "{x"})
    send(sock, "last")
    wait_for(lambda: spool.sock.poll(0), 5, "the event queued at the spool")
    spool.shutdown()
    assert acks(sock) == ["last"]
    assert sorted(written(spool)) == ["last", "spool.ship_rejected"]
    [stopped] = log_lines(out, "process.stopped")
    assert stopped["held"] == 0


def test_an_unusable_state_dir_is_an_io_episode_not_a_crash(tmp_path: Path) -> None:
    """The state dir is a plain file (a bad mount, say): events wait unacknowledged until it is a directory."""
    blocker = tmp_path / "state"
    blocker.write_text("not a directory")
    cfg = load(str(spool_config(tmp_path, state_dir=blocker)))
    ipc.ensure_runtime_dir(cfg.paths.runtime_dir)
    ctx = zmq.Context()
    clock, out = Clock(), io.StringIO()
    try:
        spool = Spool(cfg, Logger("spool", stream=out), ctx, clock=clock)
        sock = ipc.connect(ctx, zmq.DEALER, cfg.paths.runtime_dir, ipc.SPOOL_INTAKE)
        send(sock, "a")
        spool.round(1000)
        clock.now += RETRY_S
        spool.round(100)
        assert acks(sock) == [] and not spool.store.is_open
        blocker.unlink()
        clock.now += RETRY_S
        spool.round(0)
        assert acks(sock) == ["a"]
        assert sorted(written(spool)) == ["a", "spool.io_error"]
        assert len(log_lines(out, "spool.io_error")) == 1
        spool.store.close()
    finally:
        ctx.destroy(linger=0)


def test_a_shipper_dead_of_a_bug_is_restarted_counted_and_said_while_the_intake_goes_on(tmp_path: Path) -> None:
    """Issue 26, point 7: the shipper thread dying of a bug used to end the process (exit 1), and
    supervisord restarted it into the same batch. Now the thread runs again after a pause, the
    restart is an agent.thread_restarted event in the spool, and events keep being taken."""
    cfg = load(str(spool_config(tmp_path, vector_url="http://127.0.0.1:9/events")))
    ipc.ensure_runtime_dir(cfg.paths.runtime_dir)
    ctx = zmq.Context()
    out = io.StringIO()
    try:
        spool = Spool(cfg, Logger("spool", stream=out), ctx)
        real, reads = spool.store.read_unshipped, []

        def broken_once(*args: object) -> list:
            reads.append(1)
            if len(reads) == 1:
                raise RuntimeError("a bug")
            return real(*args)  # type: ignore[arg-type]

        spool.store.read_unshipped = broken_once  # type: ignore[method-assign]
        spool.store.changed.set()
        assert spool.shipper is not None
        wait_for(lambda: spool.shipper.worker.restarts == 1 and len(reads) >= 2, 10, "the shipper restarted")
        sock = ipc.connect(ctx, zmq.DEALER, cfg.paths.runtime_dir, ipc.SPOOL_INTAKE)
        send(sock, "a")
        spool.round(1000)
        assert acks(sock) == ["a"]
        assert "agent.thread_restarted" in [ujson.loads(r.payload)["type"]
                                            for r in iter_records(spool.store.path, from_head=False)]
        (said,) = log_lines(out, "agent.thread_restarted")
        assert said["thread"] == "shipper" and said["error"] == "RuntimeError: a bug" and said["restarts"] == 1
        assert spool.shipper.is_alive()
        spool.shutdown()
    finally:
        ctx.destroy(linger=0)


def test_damage_found_at_open_is_reported_once(tmp_path: Path) -> None:
    """A torn tail (a crash mid-write) is cut at open and recorded as one spool.recovered event."""
    cfg = load(str(spool_config(tmp_path)))
    path = Path(cfg.paths.state_dir) / "spool.dat"
    path.parent.mkdir(parents=True)
    with SpoolRing.open(str(path), 1 << 20) as ring:
        ring.append([b'{"event_id":"old","type":"drain.evicted"}'])
        tail = ring.stats()["tail_offset"]
    with open(path, "r+b") as f:
        f.seek(tail)
        f.write(b"SPRR" + bytes(range(60)))      # half a record: what a crash mid-pwrite leaves
    ipc.ensure_runtime_dir(cfg.paths.runtime_dir)
    ctx = zmq.Context()
    out = io.StringIO()
    try:
        spool = Spool(cfg, Logger("spool", stream=out), ctx)
        spool.round(0)
        spool.store.close()
        events = [ujson.loads(r.payload) for r in iter_records(str(path), from_head=False)]
        assert events[0]["event_id"] == "old"
        [rec] = [e for e in events if e["type"] == "spool.recovered"]
        assert rec["data"]["recovery_tail_cut"] is True and rec["data"]["recovered_records"] == 1
        assert log_lines(out, "spool.recovered")
    finally:
        ctx.destroy(linger=0)
