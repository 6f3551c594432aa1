"""Whose pages a forked worker copied: the objects on supervisord's pages that the worker wrote.

    python -m bench.cow_owners PARENT_PID CHILD_PID [--top 25]     (root: reads /proc/PID/mem)

bench.cow_pages counts a worker's anonymous pages that are copies of supervisord's (same address,
another physical page). This names what is on them. For every 8-byte word that differs
between the two copies, the owner is the nearest object header at or below it (within 1 KiB) in
the parent's memory: a reference count (1 to 2**32) followed by a pointer to a type (an object
whose type has Py_TPFLAGS_TYPE_SUBCLASS: ``type`` or a metaclass). The type is found without any help from the agent: CPython's
static ``type`` object sits at the same offset in libpython for every process that maps it, so
its address in the agent is this interpreter's ``id(type)`` moved by the difference of the
two libpython mappings (the bench and the agent run the same interpreter). A code object is
named by its file and qualified name, a function by its module and qualified name, a class by
its name. Copied pages of libpython's own writable data (its static types, deep-frozen code)
are counted as such, and so is a page whose frame a sibling worker maps at the same address:
that is the original, which supervisord, not the worker, copied by writing to it after the fork.

It is a heuristic: an object that spans pages, or a body word that happens to look like a header,
can be misnamed; what it is for is the ranking of the biggest owners (docs/footprint.md).
"""
from __future__ import annotations

import argparse
import os
import struct
import sys
from collections import Counter
from typing import BinaryIO

from bench.cow_pages import PAGE, _read, anonymous

_MAX_REFCOUNT = 1 << 32
# CPython 3.11 layouts (Include/cpython/code.h, funcobject.h, object.h, unicodeobject.h).
_TP_NAME, _TP_FLAGS = 24, 168
_TYPE_SUBCLASS = 1 << 31    # Py_TPFLAGS_TYPE_SUBCLASS: set on type and every metaclass
_CODE_FILENAME = 112
_FUNC_MODULE = 104
_ASCII_DATA, _STR_LENGTH = 48, 16
LIBPYTHON = "libpython's writable data (static types, deep-frozen modules)"
NO_HEADER = "(no object header)"
SUPERVISORD_WROTE = "(the original, still shared with a sibling: supervisord wrote its own copy)"


def _interpreter_file(pid: int | str) -> str | None:
    """The file that holds the interpreter's code and static objects: libpython where the
    interpreter is linked against it (pyenv's and python.org's builds), else the executable itself
    (Debian's /usr/bin/python3.11 is linked statically: it maps no libpython)."""
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) > 5 and os.path.basename(parts[5]).startswith("libpython"):
                return parts[5]
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _libpython_base(pid: int | str) -> tuple[int, str] | None:
    image = _interpreter_file(pid)
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) > 5 and parts[5] == image and int(parts[2], 16) == 0:
                return int(parts[0].split("-")[0], 16), parts[5]
    return None


def _libpython_data(pid: int) -> dict[int, int]:
    """Address -> frame of libpython's resident private writable pages (its static objects)."""
    out: dict[int, int] = {}
    image = _interpreter_file(pid)
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            parts = line.split()
            if len(parts) > 5 and parts[5] == image and parts[1].startswith("rw"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                pagemap.seek(lo // PAGE * 8)
                for i, (entry,) in enumerate(struct.iter_unpack("<Q", pagemap.read((hi - lo) // PAGE * 8))):
                    if entry & (1 << 63) and entry & ((1 << 55) - 1):
                        out[lo + i * PAGE] = entry & ((1 << 55) - 1)
    return out


class Memory:
    """Reads of another process's memory, cached per word."""

    def __init__(self, mem: BinaryIO) -> None:
        self.mem = mem
        self.cache: dict[int, int | None] = {}

    def word(self, address: int) -> int | None:
        if address in self.cache:
            return self.cache[address]
        value = None
        try:
            self.mem.seek(address)
            data = self.mem.read(8)
            if len(data) == 8:
                value = struct.unpack("<Q", data)[0]
        except (OSError, ValueError, OverflowError):
            pass
        self.cache[address] = value
        return value

    def cstring(self, address: int, limit: int = 120) -> str:
        out = b""
        while len(out) < limit:   # page by page: the string may end just before an unmapped page
            try:
                self.mem.seek(address + len(out))
                chunk = self.mem.read(min(limit - len(out), PAGE - (address + len(out)) % PAGE))
            except (OSError, ValueError, OverflowError):
                break
            out += chunk.split(b"\0", 1)[0]
            if b"\0" in chunk or not chunk:
                break
        return out.decode("utf-8", "replace") or "?"

    def ascii(self, address: int | None) -> str:
        if not address:
            return "?"
        length = self.word(address + _STR_LENGTH)
        if length is None or length > 200:
            return "?"
        try:
            self.mem.seek(address + _ASCII_DATA)
            return self.mem.read(length).decode("ascii", "replace")
        except (OSError, ValueError, OverflowError):
            return "?"


class Owners:
    """Names the object that owns a word of the parent's memory."""

    def __init__(self, parent: int, mem: Memory) -> None:
        if sys.version_info[:2] != (3, 11):
            raise RuntimeError("the object layouts read here are CPython 3.11's")
        mine, theirs = _libpython_base("self"), _libpython_base(parent)
        if mine is None or theirs is None or mine[1] != theirs[1]:
            raise RuntimeError("the agent must run the bench's interpreter (the same libpython)")
        self.type_type = id(type) - mine[0] + theirs[0]
        self.mem = mem
        self.types: dict[int, str | None] = {}

    def type_name(self, address: int | None) -> str | None:
        """tp_name if ``address`` is a type object, else None."""
        if address is None or address < 4096:
            return None
        if address not in self.types:
            meta = self.mem.word(address + 8)   # a type's type is type or a subclass of it (a metaclass)
            flags = self.mem.word(meta + _TP_FLAGS) if meta else None
            ok = flags is not None and bool(flags & _TYPE_SUBCLASS)
            self.types[address] = self.mem.cstring(self.mem.word(address + _TP_NAME) or 0) if ok else None
        return self.types[address]

    def header(self, address: int, floor: int) -> tuple[int, str] | None:
        """The nearest object header at or below ``address``, not below ``floor``."""
        at = address & ~7
        while at >= floor:
            refs = self.mem.word(at)
            if refs is not None and 0 < refs < _MAX_REFCOUNT:
                name = self.type_name(self.mem.word(at + 8))
                if name is not None:
                    return at, name
            at -= 8
        return None

    def describe(self, at: int, name: str) -> str:
        """The owner's row: its type, and for code, functions and classes what they are."""
        if name == "code":
            filename = self.mem.ascii(self.mem.word(at + _CODE_FILENAME))
            return f"code of {_short(filename)}"
        if name == "function":
            module = self.mem.ascii(self.mem.word(at + _FUNC_MODULE))
            return f"functions of {module}"
        if name == "type" or name.endswith("Meta"):
            return f"class {self.mem.cstring(self.mem.word(at + _TP_NAME) or 0)}"
        return name


def _short(filename: str) -> str:
    for marker in ("site-packages/", "python3.11/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.rsplit("/", 2)[-2] + "/" + filename.rsplit("/", 1)[-1] if "/" in filename else filename


def owners(parent: int, child: int, siblings: tuple[int, ...] = ()) -> tuple[Counter[str], Counter[str]]:
    """(pages by owner type, pages by owner: code and functions by file or module, classes by name)
    that ``child`` copied from ``parent``. A page goes in equal parts to the owners of the words
    that differ on it; "(no object header)" is a word with no header within 1 KiB below it (malloc's
    blocks, dict key tables, freed and reused memory, stacks). A page whose frame a sibling
    (``siblings``) maps at the same address is the original: supervisord wrote its own copy
    after the fork, and it is counted as SUPERVISORD_WROTE, not as the child's."""
    theirs, mine = anonymous(parent), anonymous(child)
    others = [anonymous(pid) for pid in siblings]
    lib_theirs, lib_mine = _libpython_data(parent), _libpython_data(child)
    by_type: Counter[str] = Counter()
    by_owner: Counter[str] = Counter()
    with open(f"/proc/{parent}/mem", "rb") as pm, open(f"/proc/{child}/mem", "rb") as cm:
        names = Owners(parent, Memory(pm))
        for address, frame in [*mine.items(), *lib_mine.items()]:
            other = theirs.get(address, lib_theirs.get(address))
            if other is None or other == frame:
                continue
            if any(o.get(address) == frame for o in others):
                by_type[SUPERVISORD_WROTE] += 1
                by_owner[SUPERVISORD_WROTE] += 1
                continue
            if address in lib_mine:
                by_type[LIBPYTHON] += 1
                by_owner[LIBPYTHON] += 1
                continue
            a, b = _read(pm, address), _read(cm, address)
            if a is None or b is None:
                continue
            found: set[tuple[str, str]] = set()
            for i, (x, y) in enumerate(zip(struct.iter_unpack("<Q", a), struct.iter_unpack("<Q", b), strict=True)):
                if x != y:
                    header = names.header(address + 8 * i, address + 8 * i - 1024)
                    found.add((header[1], names.describe(*header)) if header else (NO_HEADER, NO_HEADER))
            for kind, owner in found:
                by_type[kind] += 1 / len(found)
                by_owner[owner] += 1 / len(found)
    return by_type, by_owner


def report(pids: dict[str, int], top: int = 12) -> str:
    """Per worker: the owner types of its copied pages, then its top owner objects (MiB)."""
    mib = PAGE / 2**20
    parent = pids["supervisord"]
    rows = []
    for name, pid in pids.items():
        if pid == parent:
            continue
        try:
            by_type, by_object = owners(parent, pid, tuple(p for p in pids.values() if p not in (pid, parent)))
        except (OSError, RuntimeError) as e:
            return f"  (not available: {e})"
        total = sum(by_type.values())
        rows.append(f"  {name}: {total * mib:.1f} MiB copied; by type: "
                    + ", ".join(f"{t} {n * mib:.2f}" for t, n in by_type.most_common(8)))
        rows.extend(f"    {n * mib:6.3f}  {what}" for what, n in by_object.most_common(top))
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("parent", type=int)
    parser.add_argument("child", type=int, nargs="+")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    pids = {"supervisord": args.parent, **{f"pid {c}": c for c in args.child}}
    print(report(pids, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
