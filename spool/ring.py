"""The spool's ring file: append, group-commit, read from the head, release.

Only the spool process opens the file read-write; operators use the read-only
spool/reader.py. Byte layout and recovery rules: docs/spool-format.md.

The ring never refuses to start on a damaged file (a torn tail is cut, a
damaged record in the middle is skipped and counted) and never loses track of
itself on an I/O error: a failed call raises ``SpoolIOError`` and leaves the
in-memory state as it was before the records were written, so the same call
can simply be retried.
"""
from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Self

from common.fsutil import fsync_dir
from spool.record import (
    DATA_START,
    END,
    EPOCH_SHIFT,
    HDR,
    MAX_PAYLOAD,
    MIN_SIZE,
    SLOT_SIZE,
    Slot,
    distance,
    encode_batch,
    encode_marker,
    encode_slot,
    epoch_of,
    normalize,
    place_batch,
    record_size,
    slot_offset,
)
from spool.scan import CHUNK, Source, Start, Walker, find_start, next_epoch, recover

SPOOL_FILE = "spool.dat"   # the one spool file, under paths.state_dir
DEFAULT_SIZE = 64 * 2**20
GROUP_BYTES = 256 * 1024    # one pwrite per this many bytes of a batch: bounds the encode buffer


class SpoolIOError(OSError):
    """A write, read or sync of the spool file failed (ENOSPC, EIO, EFBIG...).

    ``appended`` says how many payloads of the failing ``append`` call were
    written before the error; the rest were not, and the ring is consistent.
    """

    appended = 0


class RecordTooLarge(ValueError):
    """A payload above the ring's ``max_payload``; nothing of the batch was written."""


@dataclass(frozen=True, slots=True)
class Dropped:
    """Unshipped records overwritten to make room: what one spool.dropped event reports."""

    count: int
    first_seq: int
    last_seq: int
    first_ts: float   # append times, epoch seconds
    last_ts: float


@dataclass(frozen=True, slots=True)
class AppendResult:
    first_seq: int
    count: int
    dropped: Dropped | None   # drops since the last successful append, this one included

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1


def merge_drop(prev: Dropped | None, seq: int, ts_ms: int) -> Dropped:
    ts = ts_ms / 1000
    if prev is None:
        return Dropped(1, seq, seq, ts, ts)
    return Dropped(prev.count + 1, prev.first_seq, seq, prev.first_ts, ts)


def check_size(size: int) -> None:
    if size < MIN_SIZE or size % SLOT_SIZE:
        raise ValueError(f"spool size {size} must be a multiple of {SLOT_SIZE} and at least {MIN_SIZE}")


def groups(payloads: Sequence[bytes], limit: int) -> Iterator[Sequence[bytes]]:
    """Split a batch into runs of at most ``limit`` on-disk bytes (one record at least)."""
    start = total = 0
    for i, p in enumerate(payloads):
        n = record_size(len(p))
        if i > start and total + n > limit:
            yield payloads[start:i]
            start, total = i, 0
        total += n
    if start < len(payloads):
        yield payloads[start:]


class SpoolRing:
    """The fixed-size ring of checksummed records; construct with ``SpoolRing.open``."""

    def __init__(self, fd: int, path: str, size: int, requested: int,
                 clock: Callable[[], float], src: Source) -> None:
        self._fd = fd
        self._path = path
        self._size = size
        self._requested = requested
        self._cap = size - DATA_START
        self._clock = clock
        self._src = src
        self.max_payload = min(MAX_PAYLOAD, (self._cap // 4 - HDR) & ~7)
        self._group_bytes = min(GROUP_BYTES, self._cap // 4)
        self._head = self._tail = DATA_START
        self._head_seq = self._next_seq = 0
        self._used = self._count = 0
        self._epoch = self._generation = 0
        self._header_dirty = False
        self._drops: Dropped | None = None
        self._closed = False
        self._stats = {"recovered_records": 0, "recovery_skipped": 0, "recovery_tail_cut": False,
                       "header_fallback": False, "header_lost": False, "skipped_records": 0,
                       "dropped_records": 0, "appended_records": 0}

    @classmethod
    def open(cls, path: str, size: int = DEFAULT_SIZE, *, clock: Callable[[], float] = time.time,
             chunk: int = CHUNK) -> SpoolRing:
        """Create and preallocate ``path``, or recover it; a file of another size keeps its size."""
        check_size(size)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            created = True
        except FileExistsError:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            created = False
        except OSError as e:
            raise _io_error(e, "create", path) from e
        try:
            with _io("open", path):
                _lock(fd, path)
                os.fchmod(fd, 0o600)   # events name nodes and workloads: not for other local users
                return cls._start(fd, path, size, created, clock, chunk)
        except BaseException:
            os.close(fd)
            if created:
                _unlink_quietly(path)
            raise

    @classmethod
    def _start(cls, fd: int, path: str, requested: int, created: bool,
               clock: Callable[[], float], chunk: int) -> SpoolRing:
        src = Source(fd, chunk)
        start = find_start(fd, src, requested)
        if os.fstat(fd).st_size < start.size:
            os.posix_fallocate(fd, 0, start.size)   # new, or cut short by someone: reserve it all now
        ring = cls(fd, path, start.size, requested, clock, src)
        ring._recover(start)
        if created:
            fsync_dir(os.path.dirname(os.path.abspath(path)))
        return ring

    def _recover(self, start: Start) -> None:
        self._generation = start.generation
        rec = recover(self._src, self._size, start.head, start.head_seq)
        self._head, self._head_seq, self._tail = rec.head, rec.head_seq, rec.tail
        self._count = rec.records
        self._used = distance(self._head, self._tail, self._size)
        self._stats.update(recovered_records=rec.records, recovery_skipped=rec.skipped,
                           recovery_tail_cut=rec.cut, header_fallback=start.fell_back,
                           header_lost=start.lost)
        self._begin_epoch(next_epoch(start.epoch, max(rec.max_seq, start.max_seq)))

    def _begin_epoch(self, epoch: int) -> None:
        """Make every later seq larger than any in the file, durably, before it is used."""
        self._epoch = epoch
        self._next_seq = epoch << EPOCH_SHIFT
        self._make_room(0)
        if self._used == 0:
            self._head_seq = self._next_seq
        self._pwrite(encode_marker(END, self._next_seq), self._tail, "write end marker")
        self._write_header()
        self._fdatasync()

    # -- the spool process's calls -------------------------------------------------

    def append(self, payloads: Sequence[bytes]) -> AppendResult:
        """Write records (no fsync: call ``sync`` once per batch), dropping the oldest if full."""
        self._check_open()
        for p in payloads:
            if len(p) > self.max_payload:
                raise RecordTooLarge(f"spool record of {len(p)} bytes is over the {self.max_payload}-byte limit")
        if epoch_of(self._next_seq + len(payloads)) != self._epoch:
            self._begin_epoch(self._epoch + 1)   # 2**32 records in one run: practically never
        first = self._next_seq
        ts_ms = int(self._clock() * 1000)
        for group in groups(payloads, self._group_bytes):
            try:
                self._append_group(group, ts_ms)
            except SpoolIOError as e:
                e.appended = self._next_seq - first
                raise
        dropped, self._drops = self._drops, None
        return AppendResult(first, len(payloads), dropped)

    def sync(self) -> None:
        """Make everything appended (and any moved head) durable with one fdatasync.

        If this raises, treat the records appended since the last good sync as
        not durable and append them again: after a failed fdatasync the kernel
        may have dropped their dirty pages.
        """
        self._check_open()
        if self._header_dirty:
            self._write_header()
        self._fdatasync()

    def read_unshipped(self, max_records: int = 1000, max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
        """Oldest unshipped records first; at most ``max_bytes`` of payload unless one record is larger."""
        self._check_open()
        out: list[tuple[int, bytes]] = []
        with _io("read", self._path):
            self._walk().gather(max_records, max_bytes, out)
        return out

    def release(self, upto_seq: int) -> None:
        """Mark every record with seq <= ``upto_seq`` shipped and persist the new head."""
        self._check_open()
        if upto_seq >= self._head_seq and self._used:
            walk = self._walk(keep_payload=False, last_seq=upto_seq)
            with _io("read", self._path):
                released, _, _ = walk.gather(1 << 62, 1 << 62, None)
            self._count -= released
            self._set_head(walk.pos, walk.seq)
            self._stats["skipped_records"] += walk.skipped
        if self._header_dirty:
            self._write_header()
            self._fdatasync()

    def stats(self) -> dict[str, Any]:
        """Geometry, fill, seqs, and what recovery and the running ring had to skip or drop."""
        return {"path": self._path, "size": self._size, "requested_size": self._requested,
                "capacity": self._cap, "used_bytes": self._used,
                "free_bytes": self._cap - self._used - HDR, "unshipped_records": self._count,
                "head_seq": self._head_seq, "next_seq": self._next_seq, "head_offset": self._head,
                "tail_offset": self._tail, "epoch": self._epoch, "generation": self._generation,
                "max_payload": self.max_payload, **self._stats}

    def close(self) -> None:
        """Persist the head and sync; the descriptor is closed even if that fails."""
        if self._closed:
            return
        try:
            self.sync()
        finally:
            self._closed = True
            os.close(self._fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------

    def _append_group(self, group: Sequence[bytes], ts_ms: int) -> None:
        plan = place_batch(self._tail, self._size, [record_size(len(p)) for p in group])
        self._make_room(plan.consumed)
        for pos, data in encode_batch(plan, self._tail, self._next_seq, ts_ms, group):
            self._pwrite(data, pos, "append")
        self._tail = plan.tail
        self._next_seq += len(group)
        self._used = distance(self._head, self._tail, self._size)
        self._count += len(group)
        self._stats["appended_records"] += len(group)

    def _make_room(self, need: int) -> None:
        """Drop the oldest unshipped records until ``need`` bytes and an end marker fit."""
        while self._used + need + HDR > self._cap:
            walk = self._walk(keep_payload=False)
            with _io("read", self._path):
                rec = next(walk, None)
            self._stats["skipped_records"] += walk.skipped
            if rec is None:
                self._set_head(self._tail, self._next_seq)
                continue
            self._drops = merge_drop(self._drops, rec.seq, rec.ts_ms)
            self._stats["dropped_records"] += 1
            self._count -= 1
            self._set_head(rec.end, rec.seq + 1)

    def _walk(self, keep_payload: bool = True, last_seq: int = 1 << 64) -> Walker:
        return Walker(self._src, self._size, self._head, self._head_seq, self._used,
                      bounded=True, keep_payload=keep_payload, last_seq=last_seq)

    def _set_head(self, pos: int, seq: int) -> None:
        self._head = normalize(pos, self._size)
        self._head_seq = seq
        self._used = distance(self._head, self._tail, self._size)
        if self._used == 0:
            self._head_seq = self._next_seq
            self._count = 0
        self._header_dirty = True

    def _write_header(self) -> None:
        gen = self._generation + 1
        slot = Slot(gen, self._size, self._head, self._head_seq, self._epoch)
        # On failure the generation is not advanced, so the retry rewrites the
        # same (possibly torn) slot and the other one, the last good header, survives.
        self._pwrite(encode_slot(slot), slot_offset(gen), "header write")
        self._generation = gen
        self._header_dirty = False

    def _pwrite(self, data: bytes, pos: int, what: str) -> None:
        self._src.forget(pos, len(data))
        view = memoryview(data)
        with _io(what, self._path):
            while view:
                n = os.pwrite(self._fd, view, pos)
                view = view[n:]
                pos += n

    def _fdatasync(self) -> None:
        with _io("fdatasync", self._path):
            os.fdatasync(self._fd)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("spool ring is closed")


class _io:
    """Re-raises a plain OSError from the block as SpoolIOError naming what failed."""

    def __init__(self, what: str, path: str) -> None:
        self.what = what
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, _type: object, e: BaseException | None, _tb: object) -> None:
        if isinstance(e, OSError) and not isinstance(e, SpoolIOError):
            raise _io_error(e, self.what, self.path) from e


def _io_error(e: OSError, what: str, path: str) -> SpoolIOError:
    return SpoolIOError(e.errno, f"spool {what} failed: {e.strerror or e}", path)


def _lock(fd: int, path: str) -> None:
    """One writer per file: a second spool (say, one restarted before the old one died) would corrupt it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
        raise SpoolIOError(e.errno, "spool file is open for writing by another process", path) from e


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
