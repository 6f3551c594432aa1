"""What the agent's private anonymous pages are: copies of supervisord's pages, and duplicates.

A worker forked from the zygote starts with every page shared with supervisord. Each
page it then writes is copied (copy on write) and held twice. ``copied`` counts, per
worker, its resident anonymous pages at an address where supervisord also has a page,
but a different one, and sorts them by how many 8-byte words differ from supervisord's
copy: a handful of small changes is a reference count written (CPython 3.11 writes the
count of every object it touches, even to read it), "same" a page written back to what
it was (a count raised and lowered again). ``duplicates`` counts the agent's anonymous
pages whose content another of its pages already has: what kernel samepage merging
(KSM) could share (docs/footprint.md). Both read /proc/PID/pagemap and /proc/PID/mem:
root only; nothing is counted without it.
"""
from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from typing import BinaryIO

from bench.procstats import PAGE

BUCKETS = ("same", "<=4 words", "<=16 words", "<=64 words", ">64 words")
_WORDS = f"<{PAGE // 8}Q"
_PRESENT = 1 << 63          # /proc/PID/pagemap: the page is resident
_PFN = (1 << 55) - 1        # its frame number (0 without root)


def words_changed(a: bytes, b: bytes) -> int:
    """How many 8-byte words differ between two pages of the same size."""
    return sum(1 for x, y in zip(struct.unpack(_WORDS, a), struct.unpack(_WORDS, b), strict=True) if x != y)


def bucket(changed: int) -> str:
    """The row of BUCKETS a page with ``changed`` differing words falls in."""
    if changed == 0:
        return BUCKETS[0]
    for limit, name in zip((4, 16, 64), BUCKETS[1:4], strict=True):
        if changed <= limit:
            return name
    return BUCKETS[4]


def anonymous(pid: int) -> dict[int, int]:
    """Virtual address -> physical frame of each resident anonymous page of ``pid``
    (anonymous mappings, [heap], [stack]: what the Python heaps are)."""
    out: dict[int, int] = {}
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
            for line in maps:
                parts = line.split(maxsplit=5)
                name = parts[5].strip() if len(parts) > 5 else ""
                if name not in ("", "[heap]", "[stack]"):
                    continue
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                pagemap.seek(lo // PAGE * 8)
                for i, (entry,) in enumerate(struct.iter_unpack("<Q", pagemap.read((hi - lo) // PAGE * 8))):
                    if entry & _PRESENT and entry & _PFN:
                        out[lo + i * PAGE] = entry & _PFN
    except OSError:
        pass
    return out


def _read(mem: BinaryIO, address: int) -> bytes | None:
    try:
        mem.seek(address)
        data = mem.read(PAGE)
        return data if len(data) == PAGE else None
    except OSError:
        return None


def copied(parent: int, child: int) -> dict[str, int]:
    """Pages of ``child`` copied from ``parent``'s (same address, another frame), by BUCKETS."""
    theirs, mine = anonymous(parent), anonymous(child)
    counts = dict.fromkeys(BUCKETS, 0)
    with open(f"/proc/{parent}/mem", "rb") as pm, open(f"/proc/{child}/mem", "rb") as cm:
        for address, frame in mine.items():
            other = theirs.get(address)
            if other is None or other == frame:
                continue
            a, b = _read(pm, address), _read(cm, address)
            if a is not None and b is not None:
                counts[bucket(words_changed(a, b))] += 1
    return counts


def duplicates(pids: Iterable[int]) -> tuple[int, int]:
    """(distinct anonymous pages of all ``pids``, how many of them repeat another's content)."""
    seen: set[int] = set()
    contents: dict[bytes, int] = {}
    for pid in pids:
        with open(f"/proc/{pid}/mem", "rb") as mem:
            for address, frame in anonymous(pid).items():
                if frame in seen:
                    continue
                seen.add(frame)
                data = _read(mem, address)
                if data is not None:
                    key = hashlib.blake2b(data, digest_size=16).digest()
                    contents[key] = contents.get(key, 0) + 1
    return len(seen), sum(n - 1 for n in contents.values())


def report(pids: dict[str, int]) -> str:
    """The two tables bench.footprint prints under its composition (MiB)."""
    mib = PAGE / 2**20
    parent = pids["supervisord"]
    rows = [f"  {'worker':<10}" + "".join(f"{b:>12}" for b in BUCKETS) + f"{'all':>8}"]
    for name, pid in pids.items():
        if pid == parent:
            continue
        c = copied(parent, pid)
        rows.append(f"  {name:<10}" + "".join(f"{c[b] * mib:12.1f}" for b in BUCKETS)
                    + f"{sum(c.values()) * mib:8.1f}")
    total, repeated = duplicates(pids.values())
    rows.append(f"  anonymous pages {total * mib:.1f} MiB, of which {repeated * mib:.1f} repeat the content "
                "of another (what KSM could merge)")
    return "\n".join(rows)
