"""Byte layout of the spool file: header slots, record headers, and where a batch lands.

Pure functions over bytes and integers, no I/O; docs/spool-format.md is the
prose version of this module. All integers are little-endian.
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

SLOT_MAGIC = b"SCOSPOOL"
VERSION = 1
SLOT_SIZE = 4096            # each header slot owns a whole page, so tearing one never touches the other
DATA_START = 2 * SLOT_SIZE  # the ring's first byte
MIN_SIZE = 64 * 1024
HDR = 32                    # bytes of every record, pad and end header
ALIGN = 8                   # records start on 8-byte boundaries, so a resync scan tests 1 offset in 8

MAGIC_PREFIX = b"SPR"
RECORD = b"SPRR"            # a record: header + payload + zero padding to ALIGN
PAD = b"SPRP"               # "the ring continues at DATA_START"; written when a record does not fit
END = b"SPRE"               # "nothing after this": written after every batch, so a clean tail is cheap to see
KINDS = (RECORD, PAD, END)

# seq = epoch << EPOCH_SHIFT | counter. Each open() starts a new epoch, so every
# record written after a crash has a larger seq than anything already in the file.
EPOCH_SHIFT = 32   # 2**32 records per run; 2**21 runs before seqs leave JSON's exact-integer range
COUNTER_MASK = (1 << EPOCH_SHIFT) - 1

MAX_PAYLOAD = 1 << 20

_SLOT = struct.Struct("<8sIIQQQQQII")   # magic version flags generation file_size data_start head_off head_seq epoch crc
_BODY = struct.Struct("<QQII")          # seq ts_ms length payload_crc (the header after magic + header crc)
_REC = struct.Struct("<4sIQQII")        # the whole header
_CRC = struct.Struct("<I")
_KIND_CRC = {kind: zlib.crc32(kind) for kind in KINDS}
_ZERO_HDR = bytes(HDR)


@dataclass(frozen=True, slots=True)
class Slot:
    """One header slot: where the oldest unshipped record is, and which epoch is current."""

    generation: int
    file_size: int
    head_off: int
    head_seq: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Header:
    """A decoded record, pad or end header whose checksum verified."""

    kind: bytes
    seq: int
    ts_ms: int
    length: int
    payload_crc: int


def encode_slot(slot: Slot) -> bytes:
    body = _SLOT.pack(SLOT_MAGIC, VERSION, 0, slot.generation, slot.file_size, DATA_START,
                      slot.head_off, slot.head_seq, slot.epoch, 0)[:-4]
    return body + _CRC.pack(zlib.crc32(body))


def decode_slot(buf: bytes) -> Slot | None:
    """The slot in ``buf``, or None if it is torn, foreign or inconsistent."""
    if len(buf) < _SLOT.size:
        return None
    magic, version, _flags, gen, size, start, head_off, head_seq, epoch, crc = _SLOT.unpack_from(buf)
    if magic != SLOT_MAGIC or version != VERSION or crc != zlib.crc32(buf[:_SLOT.size - 4]):
        return None
    if start != DATA_START or size < MIN_SIZE or size % SLOT_SIZE or not valid_pos(head_off, size):
        return None
    return Slot(gen, size, head_off, head_seq, epoch)


def choose_slot(a: Slot | None, b: Slot | None) -> tuple[Slot | None, bool]:
    """The newest valid slot, and whether a newer-looking one had to be passed over."""
    if a is None or b is None:
        best = a or b
        # One slot missing is normal on a file written once; it is a fallback only
        # if the surviving slot is not the first ever written.
        return best, best is not None and best.generation > 1
    return (a, False) if a.generation > b.generation else (b, False)


def slot_offset(generation: int) -> int:
    """Generations alternate between the two slots, so a write never lands on the newest good one."""
    return (generation % 2) * SLOT_SIZE


def encode_record(seq: int, ts_ms: int, payload: bytes) -> bytes:
    length = len(payload)
    body = _BODY.pack(seq, ts_ms, length, zlib.crc32(payload))
    pad = -length % ALIGN
    return b"".join((RECORD, _CRC.pack(zlib.crc32(body, _KIND_CRC[RECORD])), body, payload, bytes(pad)))


def encode_marker(kind: bytes, seq: int) -> bytes:
    body = _BODY.pack(seq, 0, 0, 0)
    return kind + _CRC.pack(zlib.crc32(body, _KIND_CRC[kind])) + body


def decode_header(buf: bytes | memoryview) -> Header | None:
    """The header in ``buf`` (exactly HDR bytes), or None unless its magic and checksum verify."""
    if len(buf) != HDR:
        return None
    kind = bytes(buf[:4])
    base = _KIND_CRC.get(kind)
    if base is None or _CRC.unpack_from(buf, 4)[0] != zlib.crc32(buf[8:], base):
        return None
    seq, ts_ms, length, payload_crc = _BODY.unpack_from(buf, 8)
    return Header(kind, seq, ts_ms, length, payload_crc)


def find_header(buf: bytearray, lo: int, hi: int, shift: int, min_seq: int) -> int:
    """Index of the first ALIGNed, checksum-valid header with seq >= ``min_seq`` starting in [lo, hi).

    ``shift`` is the file offset of ``buf[0]`` modulo ALIGN; the caller
    guarantees a whole header's bytes after every start below ``hi``. -1 if none.
    """
    find = buf.find
    unpack = _REC.unpack_from
    while True:
        i = find(MAGIC_PREFIX, lo, hi + len(MAGIC_PREFIX) - 1)
        if i < 0:
            return -1
        lo = i + 1
        if (i + shift) % ALIGN:
            continue
        kind, hcrc, seq, _ts, _length, _pcrc = unpack(buf, i)
        # Stale records are most of what a scan meets: reject them before any checksum.
        if seq < min_seq:
            continue
        base = _KIND_CRC.get(kind)
        if base is not None and zlib.crc32(buf[i + 8:i + HDR], base) == hcrc:
            return i


# Why the noqa below: the hot loop takes its limits as plain ints, which become its locals; a record of them
# would be one more object and attribute load per window, for the one caller (scan.Walker.skim).
def skim(buf: memoryview, lo: int, hi: int, seq: int, budget: int, last_seq: int,  # noqa: PLR0913, PLR0917
         max_records: int, max_bytes: int, out: list[tuple[int, bytes]] | None) -> tuple[int, int, int]:
    """Pass over consecutive verified records seq, seq+1, ... lying wholly in ``buf[lo:hi]``.

    The hot loop of every walk, so it builds no objects. It stops before
    anything else (a pad, an end marker, damage, a seq gap, a record running
    past ``hi`` or ``budget``, a seq above ``last_seq``, or a limit), which
    the caller then handles one step at a time. Returns (new lo, records, payload bytes);
    ``out`` collects (seq, payload) when given.
    """
    unpack = _REC.unpack_from
    crc32 = zlib.crc32
    base = _KIND_CRC[RECORD]
    n = nbytes = 0
    while n < max_records and lo + HDR <= hi:
        kind, hcrc, s, _ts, length, pcrc = unpack(buf, lo)
        size = HDR + length + (-length % ALIGN)
        if (kind != RECORD or s != seq or s > last_seq or size > budget or lo + size > hi
                or nbytes + length > max_bytes or crc32(buf[lo + 8:lo + HDR], base) != hcrc
                or crc32(buf[lo + HDR:lo + HDR + length]) != pcrc):
            break
        if out is not None:
            out.append((s, bytes(buf[lo + HDR:lo + HDR + length])))
        lo += size
        seq += 1
        budget -= size
        n += 1
        nbytes += length
    return lo, n, nbytes


def is_blank(buf: bytes | memoryview) -> bool:
    """Never-written space (a fresh preallocated file reads as zeros)."""
    return buf == _ZERO_HDR


def record_size(length: int) -> int:
    return HDR + length + (-length % ALIGN)


def valid_pos(pos: int, size: int) -> bool:
    return DATA_START <= pos < size and pos % ALIGN == 0


def normalize(pos: int, size: int) -> int:
    """Fewer than HDR bytes before the end cannot hold anything: the ring continues at DATA_START."""
    return DATA_START if size - pos < HDR else pos


def distance(start: int, end: int, size: int) -> int:
    """Bytes walked going forward from ``start`` to ``end`` round the ring (0 if equal)."""
    return (end - start) % (size - DATA_START)


def epoch_of(seq: int) -> int:
    return seq >> EPOCH_SHIFT


def lost_between(expected: int, found: int) -> int:
    """Records missing when ``found`` is read where ``expected`` should be.

    A jump into a later epoch is not a loss: an epoch ends wherever its process
    stopped, and the next one starts at counter 0.
    """
    if found <= expected:
        return 0
    if epoch_of(found) != epoch_of(expected):
        return found & COUNTER_MASK
    return found - expected


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each record of a batch goes, where pads go, and the tail after it."""

    positions: tuple[int, ...]
    pads: tuple[int, ...]
    tail: int
    consumed: int   # bytes from the old tail to the new one, pads and skipped ends included


def place_batch(tail: int, size: int, sizes: list[int]) -> Placement:
    """Lay records of the given on-disk sizes out from ``tail``; a record never straddles the end."""
    positions: list[int] = []
    pads: list[int] = []
    pos = tail
    consumed = 0
    for n in sizes:
        if pos + n > size:
            if size - pos >= HDR:
                pads.append(pos)
            consumed += size - pos
            pos = DATA_START
        positions.append(pos)
        pos += n
        consumed += n
    end = normalize(pos, size)
    if end != pos:
        consumed += size - pos
    return Placement(tuple(positions), tuple(pads), end, consumed)


def encode_batch(plan: Placement, tail: int, seq: int, ts_ms: int,
                 payloads: Sequence[bytes]) -> list[tuple[int, bytes]]:
    """The (offset, bytes) writes that put ``payloads`` where ``plan`` says.

    Records are numbered from ``seq``; a pad goes where the batch wraps, and an
    end marker after the last record. At most two writes: before and after the wrap.
    """
    segments: list[tuple[int, list[bytes]]] = [(tail, [])]
    cursor = tail
    for pos, payload in zip(plan.positions, payloads, strict=False):
        if pos != cursor:
            if cursor in plan.pads:
                segments[-1][1].append(encode_marker(PAD, seq))
            segments.append((pos, []))
        segments[-1][1].append(encode_record(seq, ts_ms, payload))
        cursor = pos + record_size(len(payload))
        seq += 1
    if plan.tail != cursor:
        segments.append((plan.tail, []))
    segments[-1][1].append(encode_marker(END, seq))
    return [(pos, b"".join(parts)) for pos, parts in segments if parts]
