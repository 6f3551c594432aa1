"""bench/cow_owners.py: it names the objects on the pages a forked child copied (docs/footprint.md, issue 20)."""
from __future__ import annotations

import os
import sys

import pytest

from bench import cow_owners, cow_pages


class Marker:
    """Instances of a class of its own, so the test knows whose pages they are."""


def sample(x: int) -> int:
    return x + 1


def test_types_headers_and_names_are_read_from_memory() -> None:
    with open(f"/proc/{os.getpid()}/mem", "rb") as mem:
        names = cow_owners.Owners(os.getpid(), cow_owners.Memory(mem))
        marker = Marker()
        assert names.type_name(id(int)) == "int" and names.type_name(id(Marker)) == "Marker"
        assert names.type_name(id(marker)) is None and names.type_name(id(7)) is None
        # A word inside the object belongs to the header below it.
        assert names.header(id(marker) + 8, id(marker) - 1024) == (id(marker), "Marker")
        assert names.describe(id(sample.__code__), "code") == f"code of repo/{os.path.basename(__file__)}"
        assert names.describe(id(sample), "function") == f"functions of {__name__}"
        assert names.describe(id(Marker), "type") == "class Marker"


@pytest.mark.skipif(not cow_pages.anonymous(os.getpid()), reason="page frames need root (/proc/PID/pagemap)")
def test_the_child_s_writes_are_named_by_their_owners() -> None:
    # The parent measured is a fork of the test's, not the test process itself: a fork has one
    # thread (only the caller is copied), and it waits in a read while measured. A test process
    # late in a long suite has threads of earlier tests' fixtures, and the measurement's own
    # allocations: anything either writes after the fork is a copy too, with owners of every type
    # (a CI run on 3.11 once failed here, where it passes alone).
    pids_r, pids_w = os.pipe()
    done_r, done_w = os.pipe()
    sys.stdout.flush()
    parent = os.fork()
    if parent == 0:
        try:
            objects = [Marker() for _ in range(20000)]   # ≈ 1 MiB of them on pages of their own
            ready_r, ready_w = os.pipe()
            child = os.fork()
            if child == 0:   # the child: a reference to each, so each one's count is written
                try:
                    os.close(pids_w)
                    held = list(objects)
                    os.write(ready_w, b"x")
                    os.read(done_r, 1)
                    del held
                finally:
                    os._exit(0)
            os.read(ready_r, 1)
            os.write(pids_w, str(child).encode())
            os.read(done_r, 1)
            os.waitpid(child, 0)
        finally:
            os._exit(0)
    os.close(pids_w)
    try:
        child = int(os.read(pids_r, 64) or b"0")
        assert child, "the measured parent did not start its child"
        by_type, by_owner = cow_owners.owners(parent, child)
        assert by_type.most_common(1)[0][0] == "Marker", by_type.most_common(5)
        assert by_type["Marker"] * cow_pages.PAGE > 0.5 * 2**20
        assert by_owner["Marker"] == by_type["Marker"]
    finally:
        os.write(done_w, b"xx")   # one for each of the two
        os.waitpid(parent, 0)
