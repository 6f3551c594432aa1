"""Reading the spool file: a bounded-buffer source, the record walker, and recovery.

Everything here only reads, so the spool's ring and the operator's read-only
reader share it. Memory is one reusable buffer of ``chunk`` bytes whatever
the file size: the file is never mmap'ed (mapped pages would count in the
process's PSS) and never read whole.
"""
from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from spool.record import (
    ALIGN,
    DATA_START,
    END,
    HDR,
    MAX_PAYLOAD,
    MIN_SIZE,
    PAD,
    RECORD,
    SLOT_SIZE,
    Header,
    Slot,
    choose_slot,
    decode_header,
    decode_slot,
    distance,
    epoch_of,
    find_header,
    is_blank,
    lost_between,
    normalize,
    record_size,
    skim,
)

CHUNK = 256 * 1024


class Source:
    """Positional reads of one file through a single reusable window.

    ``buf``/``view`` hold ``length`` valid bytes of the file from offset
    ``base``; the hot loops (record.skim, record.find_header) index them directly.
    """

    def __init__(self, fd: int, chunk: int = CHUNK) -> None:
        self._fd = fd
        self._chunk = chunk
        self.buf = bytearray(chunk)
        self.view = memoryview(self.buf)
        self.base = 0
        self.length = 0

    def get(self, pos: int, n: int) -> memoryview | bytes:
        """Up to ``n`` bytes at ``pos`` (fewer only at end of file); valid until the next call."""
        if n > self._chunk:
            return os.pread(self._fd, n, pos)
        at = self.load(pos, n)
        return self.view[at:at + n]

    def load(self, pos: int, n: int) -> int:
        """Make [pos, pos + n) readable in the window (short only at end of file); pos's index in it."""
        if not (self.base <= pos and pos + n <= self.base + self.length):
            self.base = pos
            self.length = 0   # a failed read must not leave a half-valid window behind
            self.length = os.preadv(self._fd, [self.view], pos)
        return pos - self.base

    def forget(self, pos: int, n: int) -> None:
        """Drop the window if it overlaps bytes just written, so no stale copy is ever read."""
        if pos < self.base + self.length and self.base < pos + n:
            self.length = 0


@dataclass(frozen=True, slots=True)
class Record:
    """One record whose header and payload checksums both verified."""

    seq: int
    ts_ms: int
    offset: int
    end: int        # where the next record, pad or end marker starts
    length: int
    payload: bytes  # empty when the walk was asked not to keep payloads


def iter_headers(src: Source, size: int, start: int, span: int,
                 min_seq: int = 0) -> Iterator[tuple[int, Header]]:
    """Every aligned, checksum-valid header with seq >= ``min_seq`` within ``span`` bytes of ``start``."""
    cap = size - DATA_START
    span = min(span, cap)
    first = min(size - start, span)
    for lo, hi in ((start, start + first), (DATA_START, DATA_START + span - first)):
        pos = lo
        while pos < hi:
            at = src.load(pos, HDR)
            # Only offsets whose whole header is in the window; the next window overlaps the rest.
            stop = min(hi - src.base, src.length - HDR + 1)
            if stop <= at:
                break   # end of file
            i = find_header(src.buf, at, stop, src.base % ALIGN, min_seq)
            if i < 0:
                pos = src.base + stop
                continue
            pos = src.base + i + 1
            h = decode_header(src.view[i:i + HDR])
            if h is not None:
                yield src.base + i, h


class Walker:
    """Follows the chain of records from a known position and sequence number.

    ``bounded`` walks (the live ring: head to a known tail) end when ``budget``
    bytes are used up; anything unreadable on the way is skipped and counted.
    Recovery walks do not know the tail and find it: a clean end is an end
    marker, a stale header (lower seq: the previous lap or epoch) or
    never-written zeros. Anything else is damage: the walker looks ahead for a
    later record of this chain (a damaged record in the middle) and, finding
    none, stops there (a torn tail, to be cut). ``last_seq`` stops the walk in
    front of the first record above it.

    ``skim`` covers runs of healthy records fast; ``step`` handles one thing
    of any kind; iterating yields every verified record.
    """

    # Why the noqa below: five facts of where the walk starts (file, its size, position, seq, budget), then
    # three keyword-only switches; no caller holds any two of them as a unit to pass instead.
    def __init__(self, src: Source, size: int, pos: int, seq: int, budget: int, *,  # noqa: PLR0913
                 bounded: bool, keep_payload: bool = True, last_seq: int = 1 << 64) -> None:
        self._src = src
        self._size = size
        self._bounded = bounded
        self._keep = keep_payload
        self._last_seq = last_seq
        self.pos = pos
        self.seq = seq              # the seq expected at ``pos``
        self.budget = budget        # bytes the walk may still cover
        self.skipped = 0            # records lost between records that verified
        self.pending = 0            # records lost since the last one that verified
        self.damaged = False        # something unreadable since the last record that verified
        self.last_end = pos         # the tail, if the walk stopped here
        self.max_seq = seq - 1      # highest seq seen in any valid header on the way
        self.last_ok = seq - 1      # seq of the last record that verified
        self.done = False

    def __iter__(self) -> Iterator[Record]:
        return self

    def __next__(self) -> Record:
        while not self.done:
            rec = self.step()
            if rec is not None:
                return rec
        raise StopIteration

    def gather(self, max_records: int, max_bytes: int,
               out: list[tuple[int, bytes]] | None) -> tuple[int, int, tuple[int, int] | None]:
        """Records until a limit or the end: (count, payload bytes, (offset, seq) of the first).

        At most ``max_bytes`` of payload, except that a first record larger than that is taken alone.
        """
        n = nbytes = 0
        first = None
        while not self.done and n < max_records:
            at = (self.pos, self.seq)
            k, b = self.skim(max_records - n, max_bytes - nbytes, out)
            if k:
                first = first or at
                n += k
                nbytes += b
                continue
            rec = self.step()
            if rec is None:
                continue
            if n and nbytes + rec.length > max_bytes:
                break   # read past the limit: left for the next call
            first = first or (rec.offset, rec.seq)
            n += 1
            nbytes += rec.length
            if out is not None:
                out.append((rec.seq, rec.payload))
        return n, nbytes, first

    def skim(self, max_records: int, max_bytes: int, out: list[tuple[int, bytes]] | None) -> tuple[int, int]:
        """Pass over healthy consecutive records already readable in one window: (count, payload bytes)."""
        if self.done or self.budget <= 0 or self._size - self.pos < HDR:
            return 0, 0
        src = self._src
        lo = src.load(self.pos, HDR)
        hi = min(src.length, self._size - src.base)
        end, n, nbytes = skim(src.view, lo, hi, self.seq, self.budget, self._last_seq,
                              max_records, max_bytes, out if self._keep else None)
        if n:
            self.budget -= end - lo
            self.pos = src.base + end
            self.seq += n
            self.max_seq = max(self.max_seq, self.seq - 1)
            self._verified()
        return n, nbytes

    def step(self) -> Record | None:
        """Deal with whatever is at ``pos``; a verified record is returned, anything else is None."""
        if self.budget <= 0:
            self._stop()
        elif self._size - self.pos < HDR:
            self._move_to(DATA_START)   # too close to the end for a header: wrap by rule
        else:
            raw = self._src.get(self.pos, HDR)
            h = decode_header(raw)
            if h is None or h.seq < self.seq:
                # Stale or never-written space ends a recovery walk cleanly; other bytes are damage.
                if not self._bounded and (h is not None or is_blank(raw)):
                    self._stop()
                else:
                    self._resync()
                return None
            self.max_seq = max(self.max_seq, h.seq)
            if h.kind == RECORD and h.seq > self._last_seq:
                self._stop()
            elif h.kind == RECORD and self._fits(h):
                return self._take(h)
            elif h.kind == PAD:
                self._note_gap(h.seq)
                self.seq = h.seq
                self._move_to(DATA_START)
            elif h.kind == END and not self._bounded:
                self._stop()
            else:
                self._resync()
        return None

    def _fits(self, h: Header) -> bool:
        n = record_size(h.length)
        return h.length <= MAX_PAYLOAD and self.pos + n <= self._size and n <= self.budget

    def _take(self, h: Header) -> Record | None:
        start = self.pos
        payload = self._src.get(start + HDR, h.length)
        ok = len(payload) == h.length and zlib.crc32(payload) == h.payload_crc
        data = bytes(payload) if ok and self._keep else b""
        self._note_gap(h.seq)
        self.seq = h.seq + 1
        self._move_to(start + record_size(h.length))
        if not ok:
            self.pending += 1
            self.damaged = True
            return None
        self._verified()
        return Record(h.seq, h.ts_ms, start, self.pos, h.length, data)

    def _verified(self) -> None:
        self.skipped += self.pending
        self.pending = 0
        self.damaged = False
        self.last_end = self.pos
        self.last_ok = self.seq - 1

    def _resync(self) -> None:
        self.damaged = True
        for q, _h in iter_headers(self._src, self._size, self.pos + ALIGN, self.budget - ALIGN, self.seq):
            self._move_to(q)
            return
        if self._bounded:
            self.pending += 1   # unreadable bytes up to the known tail: at least one record lost
            cap = self._size - DATA_START
            self._move_to(DATA_START + (self.pos - DATA_START + self.budget) % cap)
        else:
            self._stop()

    def _note_gap(self, found: int) -> None:
        lost = lost_between(self.seq, found)
        if lost:
            self.pending += lost
            self.damaged = True

    def _move_to(self, pos: int) -> None:
        self.budget -= distance(self.pos, pos, self._size) or (self._size - self.pos)
        self.pos = pos

    def _stop(self) -> None:
        self.done = True
        if self._bounded:
            # The tail is known, so whatever was unreadable lay between good records.
            self.skipped += self.pending
            self.pending = 0
            self.damaged = False


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a recovery walk found: the live span and what it had to step over."""

    head: int
    head_seq: int
    tail: int
    next_seq: int     # seq after the newest record that verified
    records: int
    payload_bytes: int
    skipped: int      # records lost in the middle (damaged, or a seq gap)
    cut: bool         # a torn or damaged tail was cut off
    max_seq: int


def recover(src: Source, size: int, head: int, head_seq: int) -> Recovered:
    """Walk from the durable head to the real tail, verifying every record, holding none."""
    walk = Walker(src, size, head, head_seq, size - DATA_START, bounded=False, keep_payload=False)
    records, payload_bytes, first = walk.gather(1 << 62, 1 << 62, None)
    tail = normalize(walk.last_end, size)
    if first is None:
        return Recovered(tail, head_seq, tail, head_seq, 0, 0, walk.skipped, walk.damaged, walk.max_seq)
    # A head that pointed at damage moves to the first record that verified.
    return Recovered(first[0], first[1], tail, walk.last_ok + 1, records, payload_bytes,
                     walk.skipped, walk.damaged, walk.max_seq)


@dataclass(frozen=True, slots=True)
class Start:
    """Where a walk of an existing file begins, from its header or, with both slots lost, a scan."""

    size: int
    head: int
    head_seq: int
    epoch: int
    generation: int
    max_seq: int        # highest seq the start-up scan saw (-1 when the header was good)
    fell_back: bool     # the newer header slot was torn; the older one was used
    lost: bool          # no valid header slot in a non-empty file


def find_start(fd: int, src: Source, default_size: int) -> Start:
    on_disk = os.fstat(fd).st_size
    slot, fell_back = load_slot(fd) if on_disk else (None, False)
    if slot is not None:
        return Start(slot.file_size, slot.head_off, slot.head_seq, slot.epoch, slot.generation,
                     -1, fell_back, False)
    fits = on_disk >= MIN_SIZE and on_disk % SLOT_SIZE == 0
    size = on_disk if fits else default_size
    found = locate_oldest(src, size) if on_disk > 0 else None
    head, head_seq, max_seq = found or (DATA_START, 0, -1)
    return Start(size, head, head_seq, 0, 0, max_seq, False, on_disk > 0)


def load_slot(fd: int) -> tuple[Slot | None, bool]:
    """The newest valid header slot and whether the newer one was torn."""
    a = decode_slot(os.pread(fd, SLOT_SIZE, 0))
    b = decode_slot(os.pread(fd, SLOT_SIZE, SLOT_SIZE))
    return choose_slot(a, b)


def locate_oldest(src: Source, size: int) -> tuple[int, int, int] | None:
    """With both header slots lost: (offset, seq) of the oldest record in the file, and the highest seq.

    One pass over the whole file; starting from the oldest re-ships records
    already shipped, which at-least-once delivery allows.
    """
    oldest: tuple[int, int] | None = None
    highest = -1
    for pos, h in iter_headers(src, size, DATA_START, size - DATA_START):
        highest = max(highest, h.seq)
        if h.kind == RECORD and (oldest is None or h.seq < oldest[1]):
            oldest = (pos, h.seq)
    if oldest is None:
        return None
    return oldest[0], oldest[1], highest


def next_epoch(slot_epoch: int, max_seq: int) -> int:
    """An epoch above every seq the file may hold."""
    return max(slot_epoch, epoch_of(max(max_seq, 0))) + 1
