"""bench/cow_pages.py: it finds the pages a forked child copied, by how much they changed,
and the pages whose content repeats another's (docs/footprint.md, issue 20)."""
from __future__ import annotations

import mmap
import os

import pytest

from bench import cow_pages
from bench.procstats import PAGE


def test_words_changed_and_bucket() -> None:
    a = bytes(PAGE)
    b = bytearray(a)
    assert cow_pages.words_changed(a, bytes(b)) == 0
    b[0] = 1
    b[PAGE - 1] = 1
    assert cow_pages.words_changed(a, bytes(b)) == 2
    assert [cow_pages.bucket(n) for n in (0, 1, 4, 5, 16, 17, 64, 65, 512)] == [
        "same", "<=4 words", "<=4 words", "<=16 words", "<=16 words", "<=64 words", "<=64 words",
        ">64 words", ">64 words"]


@pytest.mark.skipif(not cow_pages.anonymous(os.getpid()), reason="page frames need root (/proc/PID/pagemap)")
def test_a_child_s_copied_pages_are_found_and_sorted() -> None:
    # Three pages of our own, filled before the fork so the child inherits them shared.
    region = mmap.mmap(-1, 3 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(3):
        region[i * PAGE:(i + 1) * PAGE] = bytes([0x10 + i]) * PAGE
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: one word changed in page 0, page 1 written back as it was, page 2 left alone
        try:
            region[8] = 0x99
            region[PAGE] = 0x11
            os.write(ready_w, b"x")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"x"
        base = _address(region)
        mine, theirs = cow_pages.anonymous(os.getpid()), cow_pages.anonymous(pid)
        assert mine[base] != theirs[base]                     # copied
        assert mine[base + PAGE] != theirs[base + PAGE]       # copied, content the same
        assert mine[base + 2 * PAGE] == theirs[base + 2 * PAGE]   # still shared
        counts = cow_pages.copied(os.getpid(), pid)
        assert counts["same"] >= 1 and counts["<=4 words"] >= 1
        total, repeated = cow_pages.duplicates([os.getpid(), pid])
        assert total > repeated >= 1   # page 1: two frames, one content
    finally:
        os.write(done_w, b"x")
        os.waitpid(pid, 0)
        region.close()


def _address(region: mmap.mmap) -> int:
    """Start address of an mmap object (the anonymous mapping whose first page holds our pattern)."""
    first = bytes([0x10]) * PAGE
    with open(f"/proc/{os.getpid()}/mem", "rb") as mem:
        for address in cow_pages.anonymous(os.getpid()):
            mem.seek(address)
            if mem.read(PAGE) == first:
                mem.seek(address + PAGE)
                if mem.read(PAGE) == bytes([0x11]) * PAGE:
                    return address
    raise AssertionError("mapping not found")
