"""A read-only view of a spool file for operators, safe while the spool process runs.

The file is opened O_RDONLY and never written. A record the spool is writing
at that moment may fail its checksum; it is then not shown, and the view ends
there. Nothing is ever returned whose checksums did not verify. The head comes
from the durable header, so it can lag the running spool by the releases it
has not yet persisted.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from spool.record import ALIGN, DATA_START, RECORD, distance, normalize
from spool.ring import DEFAULT_SIZE
from spool.scan import Record, Source, Walker, find_start, iter_headers, recover


def iter_records(path: str, from_head: bool = True) -> Iterator[Record]:
    """Unshipped records oldest first; with ``from_head=False``, every record still in the file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        src = Source(fd)
        start = find_start(fd, src, DEFAULT_SIZE)
        size = start.size
        pos, seq = start.head, start.head_seq
        if not from_head:
            pos, seq = _oldest_retained(src, size, pos, seq)
        yield from Walker(src, size, pos, seq, size - DATA_START, bounded=False)
    finally:
        os.close(fd)


def follow(path: str, pos: int, seq: int) -> Iterator[Iterator[Record]]:
    """Passes over the records the spool appends from (pos, seq) on, forever: one per next().

    Each pass walks from where the last one stopped, the way recovery does:
    it ends at the end marker (or a record still being written) and the next
    pass continues there. A restart of the spool (a later epoch) or a lap of
    the ring (newer records where we stood) is followed, never misread: only
    records whose checksums verify are yielded, each seq once. The caller
    waits between passes.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        src = Source(fd)
        size = find_start(fd, src, DEFAULT_SIZE).size
        while True:
            src.length = 0   # forget the read window: the file has changed since
            walk = Walker(src, size, pos, seq, size - DATA_START, bounded=False)
            yield walk
            pos, seq = normalize(walk.last_end, size), walk.last_ok + 1
    finally:
        os.close(fd)


def read_stats(path: str) -> dict[str, Any]:
    """What recovery would find now: head, tail, unshipped count, damage, without changing anything."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        src = Source(fd)
        start = find_start(fd, src, DEFAULT_SIZE)
        rec = recover(src, start.size, start.head, start.head_seq)
    finally:
        os.close(fd)
    return {"path": path, "size": start.size, "generation": start.generation, "epoch": start.epoch,
            "head_seq": rec.head_seq, "next_seq": rec.next_seq, "head_offset": rec.head,
            "tail_offset": rec.tail, "used_bytes": distance(rec.head, rec.tail, start.size),
            "unshipped_records": rec.records, "unshipped_payload_bytes": rec.payload_bytes,
            "skipped": rec.skipped, "tail_cut": rec.cut, "header_fallback": start.fell_back,
            "header_lost": start.lost}


def _oldest_retained(src: Source, size: int, head: int, head_seq: int) -> tuple[int, int]:
    """The first shipped-but-not-yet-overwritten record after the tail, else the head itself."""
    live = recover(src, size, head, head_seq)
    span = distance(live.tail, live.head, size) or size - DATA_START
    for pos, h in iter_headers(src, size, live.tail + ALIGN, span - ALIGN):
        if h.kind == RECORD and h.seq < live.head_seq:
            return pos, h.seq
    return live.head, live.head_seq
