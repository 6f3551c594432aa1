"""The spool ring file: round trips, crash recovery, damage, wrap-around and I/O errors."""
from __future__ import annotations

import errno
import itertools
import json
import os
import stat
import subprocess
import sys
import tempfile
import threading
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.reader import iter_records, read_stats
from spool.record import DATA_START, HDR, SLOT_SIZE
from spool.ring import RecordTooLarge, SpoolIOError, SpoolRing
from tests.ci import require
from tests.fuzzing import fuzz

SMALL = 64 * 1024
REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def event(i: int) -> bytes:
    """A ~300-byte JSON event whose content says which one it is."""
    return json.dumps({"event_id": f"e-{i}", "seq": i, "type": "drain.evicted",
                       "data": {"pad": "x" * 240}}).encode()


def crash(ring: SpoolRing) -> None:
    """The process vanishes: the file keeps what was written, nothing more is persisted."""
    os.close(ring._fd)


def poke(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def payloads(ring: SpoolRing) -> list[bytes]:
    return [p for _, p in ring.read_unshipped(100_000, 1 << 30)]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "spool.ring"


def test_append_read_release_round_trip(path: Path) -> None:
    """Records come back oldest first with increasing seqs until released."""
    with SpoolRing.open(str(path), SMALL) as ring:
        res = ring.append([event(i) for i in range(5)])
        ring.sync()
        got = ring.read_unshipped()
        assert [p for _, p in got] == [event(i) for i in range(5)]
        assert [s for s, _ in got] == list(range(res.first_seq, res.last_seq + 1))
        ring.release(got[1][0])
        assert payloads(ring) == [event(i) for i in range(2, 5)]
        assert ring.stats()["unshipped_records"] == 3
        ring.release(res.last_seq)
        assert ring.read_unshipped() == []
        assert ring.stats()["used_bytes"] == 0


def test_read_unshipped_respects_limits_but_returns_at_least_one(path: Path) -> None:
    """A batch never exceeds the byte limit, except that one big record still ships."""
    with SpoolRing.open(str(path), SMALL) as ring:
        ring.append([b"a" * 100, b"b" * 100, b"c" * 100])
        assert len(ring.read_unshipped(max_records=2)) == 2
        assert len(ring.read_unshipped(max_bytes=250)) == 2
        assert len(ring.read_unshipped(max_bytes=10)) == 1


def test_new_file_is_preallocated_and_private(path: Path) -> None:
    """The whole size is reserved up front and only the owner can read events."""
    SpoolRing.open(str(path), SMALL).close()
    st = path.stat()
    assert st.st_size == SMALL
    assert st.st_blocks * 512 >= SMALL
    assert stat.S_IMODE(st.st_mode) == 0o600


def test_existing_file_keeps_its_size(path: Path) -> None:
    """A changed size setting does not silently reshape a ring holding unshipped events."""
    with SpoolRing.open(str(path), SMALL) as ring:
        ring.append([b"keep"])
    with SpoolRing.open(str(path), 2 * SMALL) as ring:
        assert ring.stats()["size"] == SMALL
        assert ring.stats()["requested_size"] == 2 * SMALL
        assert payloads(ring) == [b"keep"]


def test_reopen_after_crash_recovers_head_and_tail(path: Path) -> None:
    """Released records stay released; synced records survive; seqs keep increasing."""
    ring = SpoolRing.open(str(path), SMALL)
    res = ring.append([event(i) for i in range(10)])
    ring.sync()
    ring.release(res.first_seq + 3)
    crash(ring)
    ring = SpoolRing.open(str(path), SMALL)
    st = ring.stats()
    assert payloads(ring) == [event(i) for i in range(4, 10)]
    assert (st["recovered_records"], st["recovery_skipped"], st["recovery_tail_cut"]) == (6, 0, False)
    assert ring.stats()["head_seq"] == res.first_seq + 4
    later = ring.append([event(10)])
    assert later.first_seq > res.last_seq
    ring.close()
    with SpoolRing.open(str(path), SMALL) as ring:
        assert payloads(ring) == [event(i) for i in range(4, 11)]


def _ten_records(path: Path) -> list:
    with SpoolRing.open(str(path), SMALL) as ring:
        ring.append([event(i) for i in range(10)])
    return list(iter_records(str(path)))


def test_torn_last_record_is_cut_and_earlier_records_kept(path: Path) -> None:
    """A record whose payload only half reached the disk is cut; the ring carries on."""
    recs = _ten_records(path)
    last = recs[-1]
    poke(path, last.offset + HDR + last.length // 2, os.urandom(last.length - last.length // 2))
    with SpoolRing.open(str(path), SMALL) as ring:
        st = ring.stats()
        assert (st["recovered_records"], st["recovery_tail_cut"]) == (9, True)
        assert payloads(ring) == [event(i) for i in range(9)]
        ring.append([b"after"])
        assert payloads(ring)[-1] == b"after"
    with SpoolRing.open(str(path), SMALL) as ring:
        assert ring.stats()["recovery_tail_cut"] is False
        assert payloads(ring) == [event(i) for i in range(9)] + [b"after"]


def test_record_header_cut_short_is_cut(path: Path) -> None:
    """A header written only in part (the rest still zero) ends the ring there."""
    recs = _ten_records(path)
    poke(path, recs[-1].offset + 12, bytes(recs[-1].end - recs[-1].offset - 12 + HDR))
    with SpoolRing.open(str(path), SMALL) as ring:
        assert ring.stats()["recovery_tail_cut"] is True
        assert payloads(ring) == [event(i) for i in range(9)]


def test_garbage_after_the_last_record_is_cut(path: Path) -> None:
    """Random bytes where the end marker should be: every record kept, the garbage cut."""
    recs = _ten_records(path)
    poke(path, recs[-1].end, os.urandom(4096))
    with SpoolRing.open(str(path), SMALL) as ring:
        st = ring.stats()
        assert (st["recovered_records"], st["recovery_skipped"], st["recovery_tail_cut"]) == (10, 0, True)
        assert payloads(ring) == [event(i) for i in range(10)]


@pytest.mark.parametrize("where", ["magic", "seq", "length", "payload", "last payload byte"])
def test_damaged_middle_record_is_skipped_and_counted(path: Path, where: str) -> None:
    """Damage to any field of one record loses that record only; later records still read."""
    recs = _ten_records(path)
    victim = recs[4]
    offset = victim.offset + {"magic": 0, "seq": 9, "length": 26, "payload": HDR + 5,
                              "last payload byte": HDR + victim.length - 1}[where]
    with open(path, "rb") as f:
        f.seek(offset)
        byte = f.read(1)[0]
    poke(path, offset, bytes([byte ^ 0x5A]))
    with SpoolRing.open(str(path), SMALL) as ring:
        st = ring.stats()
        assert payloads(ring) == [event(i) for i in range(10) if i != 4]
        assert (st["recovery_skipped"], st["recovery_tail_cut"]) == (1, False)


@pytest.mark.parametrize("field", [9, HDR + 5])
def test_damage_appearing_while_running_is_skipped_counted_and_released(path: Path, field: int) -> None:
    """Bit rot under a running spool: the bad record is never shipped, the rest still are."""
    with SpoolRing.open(str(path), SMALL) as ring:
        res = ring.append([event(i) for i in range(10)])
        ring.sync()
        victim = list(iter_records(str(path)))[4]
        poke(path, victim.offset + field, b"\xee")
        assert payloads(ring) == [event(i) for i in range(10) if i != 4]
        ring.release(res.last_seq)
        st = ring.stats()
        assert (st["skipped_records"], st["unshipped_records"], st["used_bytes"]) == (1, 0, 0)
        ring.append([b"next"])
        assert payloads(ring) == [b"next"]


def test_wrap_drops_oldest_unshipped_and_reports_them(path: Path) -> None:
    """Filling a small ring overwrites the oldest unshipped records, each reported once."""
    clock = Clock()
    with SpoolRing.open(str(path), SMALL, clock=clock) as ring:
        first = ring.append([event(0)]).first_seq
        ring.release(first)                      # shipped: overwriting it is not a drop
        seqs: dict[int, int] = {}
        dropped = []
        for i in range(1, 400):
            clock.now += 1
            res = ring.append([event(i)])
            seqs[res.first_seq] = i
            if res.dropped:
                dropped.append(res.dropped)
        kept = ring.read_unshipped(100_000, 1 << 30)
        assert sum(d.count for d in dropped) == ring.stats()["dropped_records"] > 0
        assert dropped[0].first_seq == first + 1
        assert dropped[0].first_ts == 1_700_000_001.0
        for a, b in itertools.pairwise(dropped):
            assert b.first_seq == a.last_seq + 1
        assert kept[0][0] == dropped[-1].last_seq + 1
        assert kept[-1][1] == event(399)
        assert len(kept) + sum(d.count for d in dropped) == 399
        assert [seqs[s] for s, _ in kept] == list(range(400 - len(kept), 400))


def test_batch_bigger_than_free_space_drops_only_what_it_needs(path: Path) -> None:
    """Drops start at the head and stop as soon as the batch fits."""
    with SpoolRing.open(str(path), SMALL) as ring:
        ring.append([event(i) for i in range(150)])
        free = ring.stats()["free_bytes"]
        res = ring.append([event(1000 + i) for i in range(30)])
        assert res.dropped is not None
        need = 30 * (HDR + len(event(1000))) - free
        assert 0 < res.dropped.count <= need // (HDR + len(event(0))) + 2
        assert payloads(ring)[-30:] == [event(1000 + i) for i in range(30)]


def test_wrapped_ring_survives_reopen(path: Path) -> None:
    """After several laps the recovered head, tail and content match the live ring."""
    with SpoolRing.open(str(path), SMALL) as ring:
        for i in range(0, 600, 7):
            ring.append([event(j) for j in range(i, i + 7)])
            ring.release(ring.read_unshipped(3)[-1][0])
        before = payloads(ring)
        stats = ring.stats()
    with SpoolRing.open(str(path), SMALL) as ring:
        assert payloads(ring) == before
        st = ring.stats()
        assert (st["head_offset"], st["tail_offset"], st["unshipped_records"]) == (
            stats["head_offset"], stats["tail_offset"], stats["unshipped_records"])


def test_torn_newest_header_slot_falls_back_to_the_other(path: Path) -> None:
    """The head from the previous release is used; at worst records ship twice."""
    ring = SpoolRing.open(str(path), SMALL)
    res = ring.append([event(i) for i in range(6)])
    ring.sync()
    ring.release(res.first_seq + 1)
    ring.release(res.first_seq + 3)
    gen = ring.stats()["generation"]
    crash(ring)
    poke(path, (gen % 2) * SLOT_SIZE + 20, b"\xff\xff\xff\xff")
    with SpoolRing.open(str(path), SMALL) as ring:
        assert ring.stats()["header_fallback"] is True
        assert payloads(ring) == [event(i) for i in range(2, 6)]


def test_both_header_slots_lost_still_recovers_every_record(path: Path) -> None:
    """With no header the oldest record in the file becomes the head (re-shipping is allowed)."""
    ring = SpoolRing.open(str(path), SMALL)
    res = ring.append([event(i) for i in range(6)])
    ring.release(res.first_seq + 2)
    crash(ring)
    poke(path, 0, os.urandom(2 * SLOT_SIZE))
    with SpoolRing.open(str(path), SMALL) as ring:
        assert ring.stats()["header_lost"] is True
        assert payloads(ring) == [event(i) for i in range(6)]
        ring.append([b"new"])
    with SpoolRing.open(str(path), SMALL) as ring:
        assert ring.stats()["header_lost"] is False
        assert payloads(ring)[-1] == b"new"


def test_not_a_spool_file_is_taken_over_not_fatal(path: Path) -> None:
    """Garbage at the configured path never stops the spool from starting."""
    path.write_bytes(os.urandom(SMALL))
    with SpoolRing.open(str(path), SMALL) as ring:
        assert ring.read_unshipped() == []
        ring.append([b"x"])
        assert payloads(ring) == [b"x"]


def test_second_writer_is_refused_while_the_first_holds_the_file(path: Path) -> None:
    """Two spools writing one ring would corrupt it; the second gets a clear error."""
    with SpoolRing.open(str(path), SMALL) as ring:
        ring.append([b"mine"])
        with pytest.raises(SpoolIOError, match="another process"):
            SpoolRing.open(str(path), SMALL)
        assert path.exists() and payloads(ring) == [b"mine"]
    with SpoolRing.open(str(path), SMALL) as ring:
        assert payloads(ring) == [b"mine"]


def test_oversized_record_is_refused_and_nothing_written(path: Path) -> None:
    """One record above the bound fails the whole batch before any byte is written."""
    with SpoolRing.open(str(path), SMALL) as ring:
        before = ring.stats()
        with pytest.raises(RecordTooLarge, match="limit"):
            ring.append([b"ok", b"x" * (ring.max_payload + 1)])
        assert ring.stats() == before
        ring.append([b"x" * ring.max_payload])
        assert len(payloads(ring)[0]) == ring.max_payload


def test_failed_sync_raises_spool_io_error_and_a_retry_works(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EIO from fdatasync surfaces as SpoolIOError; the ring stays usable."""
    with SpoolRing.open(str(path), SMALL) as ring:
        ring.append([b"a"])
        real = os.fdatasync
        calls = []

        def failing(fd: int) -> None:
            calls.append(fd)
            if len(calls) == 1:
                raise OSError(errno.EIO, "Input/output error")
            real(fd)

        monkeypatch.setattr(os, "fdatasync", failing)
        with pytest.raises(SpoolIOError) as info:
            ring.sync()
        assert info.value.errno == errno.EIO
        ring.sync()
        assert payloads(ring) == [b"a"]


_FSIZE_CHILD = r"""
import errno, json, resource, signal, sys
from spool.ring import SpoolIOError, SpoolRing
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # get EFBIG instead of being killed
path = sys.argv[1]
ring = SpoolRing.open(path, 256 * 1024)
resource.setrlimit(resource.RLIMIT_FSIZE, (128 * 1024, resource.RLIM_INFINITY))
ok, i, err = [], 0, None
while err is None:
    batch = [b"rec-%06d-" % (i + k) + b"y" * 300 for k in range(10)]
    try:
        ring.append(batch)
        ok += batch
        i += 10
    except SpoolIOError as e:
        err, before, failed = e, ring.stats(), batch
after = ring.stats()
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
ring.append(failed)
ring.sync()
got = [p.decode() for _, p in ring.read_unshipped(10**6, 1 << 30)]
ring.close()
again = [p.decode() for _, p in SpoolRing.open(path, 256 * 1024).read_unshipped(10**6, 1 << 30)]
print(json.dumps({"errno": err.errno, "msg": str(err), "appended": err.appended,
                  "same": before == after, "expect": [p.decode() for p in ok + failed],
                  "got": got, "again": again}))
"""


def test_write_error_mid_ring_leaves_ring_consistent_and_retry_works(path: Path) -> None:
    """A real EFBIG from the kernel (RLIMIT_FSIZE) mid-append: clear error, no state change, retry ok."""
    out = subprocess.run([sys.executable, "-c", _FSIZE_CHILD, str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True)
    r = json.loads(out.stdout)
    assert r["errno"] == errno.EFBIG
    assert "spool append failed" in r["msg"]
    assert r["appended"] == 0 and r["same"] is True
    assert r["got"] == r["expect"] == r["again"]


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):  # type: ignore[no-untyped-def]
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                             capture_output=True, text=True, check=False)
    require(mounted.returncode == 0, f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_no_space_for_the_file_is_a_clear_error(tiny_tmpfs: Path) -> None:
    """ENOSPC while preallocating: SpoolIOError, no half-made file, and a fitting size then works."""
    path = tiny_tmpfs / "spool.ring"
    with pytest.raises(SpoolIOError) as info:
        SpoolRing.open(str(path), 1024 * 1024)
    assert info.value.errno == errno.ENOSPC
    assert not path.exists()
    with SpoolRing.open(str(path), 128 * 1024) as ring:
        ring.append([b"fits"])
        assert payloads(ring) == [b"fits"]


def test_operator_reader_sees_unshipped_and_retained_records(path: Path) -> None:
    """from_head lists what is still to ship; from_head=False also lists shipped leftovers."""
    with SpoolRing.open(str(path), SMALL) as ring:
        res = ring.append([event(i) for i in range(5)])
        ring.release(res.first_seq + 1)
        ring.sync()
        assert [r.payload for r in iter_records(str(path))] == [event(i) for i in range(2, 5)]
        assert [r.payload for r in iter_records(str(path), from_head=False)] == [event(i) for i in range(5)]
        before = path.read_bytes()
        st = read_stats(str(path))
        live = ring.stats()
        assert (st["unshipped_records"], st["head_seq"], st["tail_offset"]) == (
            3, live["head_seq"], live["tail_offset"])
        assert path.read_bytes() == before


def test_operator_reader_while_a_writer_appends(path: Path) -> None:
    """Reading during appends yields only whole, verified records in order, and never writes."""
    ring = SpoolRing.open(str(path), 256 * 1024)
    done = threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(0, 3000, 10):
                ring.append([event(j) for j in range(i, i + 10)])
                if i % 200 == 0:
                    ring.release(ring.read_unshipped(50)[-1][0])
        except Exception as e:  # noqa: BLE001 -- any failure in the thread is asserted on below
            failures.append(e)
        finally:
            done.set()

    t = threading.Thread(target=writer)
    t.start()
    passes = 0
    while not done.is_set() or passes == 0:
        seen = [json.loads(r.payload)["seq"] for r in iter_records(str(path))]
        assert seen == sorted(set(seen))
        passes += 1
    t.join()
    assert not failures
    ring.sync()
    final = [r.payload for r in iter_records(str(path))]
    assert final == payloads(ring)
    assert json.loads(final[-1])["seq"] == 2999
    ring.close()


@cache
def _fuzz_base() -> tuple[bytes, dict[int, bytes]]:
    """A wrapped small ring (stale laps, pads, released and unshipped records) and every record written."""
    written: dict[int, bytes] = {}
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "base.ring")
        with SpoolRing.open(p, SMALL) as ring:
            for i in range(0, 330, 11):
                batch = [event(j)[: 100 + 37 * (j % 7)] for j in range(i, i + 11)]
                res = ring.append(batch)
                written.update(zip(range(res.first_seq, res.last_seq + 1), batch, strict=False))
                ring.release(res.first_seq + 4)
        with open(p, "rb") as f:
            return f.read(), written


_offsets = st.one_of(st.integers(0, 63), st.integers(SLOT_SIZE, SLOT_SIZE + 63),
                     st.integers(DATA_START, SMALL - 1))


def _check(records: list[tuple[int, bytes]], written: dict[int, bytes]) -> None:
    seqs = [s for s, _ in records]
    assert seqs == sorted(set(seqs))
    for seq, payload in records:
        assert written.get(seq) == payload


@fuzz(150)
@given(flips=st.lists(st.tuples(_offsets, st.integers(1, 255)), max_size=6),
       splice=st.none() | st.tuples(_offsets, st.binary(min_size=1, max_size=96)),
       truncate=st.none() | st.integers(0, SMALL))
def test_fuzzed_file_never_crashes_open_and_never_yields_unverified_records(
        flips: list[tuple[int, int]], splice: tuple[int, bytes] | None, truncate: int | None) -> None:
    """Random flips, splices and truncations: open() works, and every record returned is one written."""
    base, written = _fuzz_base()
    data = bytearray(base)
    for off, mask in flips:
        data[off] ^= mask
    if splice is not None:
        data[splice[0]:splice[0] + len(splice[1])] = splice[1]
        del data[SMALL:]
    if truncate is not None:
        del data[truncate:]
    # tmpfs when there is one: this test is about parsing, and fdatasync there is free.
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
        p = os.path.join(d, "fuzzed.ring")
        with open(p, "wb") as f:
            f.write(data)
        for from_head in (True, False):
            _check([(r.seq, r.payload) for r in iter_records(p, from_head)], written)
        read_stats(p)
        with SpoolRing.open(p, SMALL) as ring:
            _check(ring.read_unshipped(100_000, 1 << 30), written)
            res = ring.append([b"after"])
            assert ring.read_unshipped(100_000, 1 << 30)[-1] == (res.first_seq, b"after")
        with SpoolRing.open(p, SMALL) as ring:
            got = ring.read_unshipped(100_000, 1 << 30)
            assert got[-1] == (res.first_seq, b"after")
            _check(got[:-1], written)


def _shm_dir() -> tempfile.TemporaryDirectory:
    # tmpfs when there is one: these tests are about layout, and fdatasync there is free.
    return tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


_ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.lists(st.one_of(st.integers(0, 600), st.integers(0, 14_000)),
                                          min_size=1, max_size=12)),
    st.tuples(st.just("release"), st.integers(0, 40)),
    st.tuples(st.just("reopen"), st.booleans()),
), max_size=40)


@fuzz(60)
@given(ops=_ops, chunk=st.sampled_from([4096, 256 * 1024]))
def test_ring_matches_a_simple_model_through_appends_releases_drops_and_reopens(
        ops: list[tuple[str, object]], chunk: int) -> None:
    """Whatever the mix of record sizes, wraps and reopens: unshipped = appended - released - dropped.

    A 4 KiB read window makes records straddle windows and exceed them.
    """
    model: list[tuple[int, bytes]] = []
    n = 0
    with _shm_dir() as d:
        p = os.path.join(d, "model.ring")
        ring = SpoolRing.open(p, SMALL, chunk=chunk)
        for op, arg in ops:
            if op == "append":
                batch = [(b"%d:" % (n + i)) + b"z" * size for i, size in enumerate(arg)]  # type: ignore[union-attr]
                n += len(batch)
                res = ring.append(batch)
                model += zip(range(res.first_seq, res.last_seq + 1), batch, strict=False)
                if res.dropped:   # the oldest, possibly including the start of this very batch
                    lost, model = model[:res.dropped.count], model[res.dropped.count:]
                    assert (lost[0][0], lost[-1][0]) == (res.dropped.first_seq, res.dropped.last_seq)
            elif op == "release" and model:
                k = min(int(arg), len(model))  # type: ignore[call-overload]
                if k:
                    ring.release(model[k - 1][0])
                    model = model[k:]
            elif op == "reopen":
                if arg:
                    ring.close()
                else:
                    ring.sync()
                    crash(ring)
                ring = SpoolRing.open(p, SMALL, chunk=chunk)
                assert ring.stats()["recovery_skipped"] == 0
            assert ring.read_unshipped(100_000, 1 << 30) == model
            assert ring.stats()["unshipped_records"] == len(model)
        ring.close()
