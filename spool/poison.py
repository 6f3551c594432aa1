"""Records Vector refused alone, again and again: kept in a file of their own, bounded, readable.

The shipper sets such a record aside so it does not block everything behind
it; it is never silently gone. Before the ring releases it, the record is
appended here (one JSON object per line, fsynced) with why it was refused,
and a ``spool.poison`` event with its event_id goes to Vector.
``sco-agentctl spool poison`` prints this file.

The file lives next to the spool file (the state dir) and only the spool
process writes it. Past ``max_bytes`` the oldest entries are dropped (the
file is rewritten to half the bound, atomically) and the number dropped is
returned, so the caller says so: the events already carried each record's
event_id to Vector.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import ujson

POISON_FILE = "spool.poison"
MAX_BYTES = 4 << 20


def entry(seq: int, record: bytes, status: int | None, message: str, strikes: int, when: str) -> dict[str, Any]:
    """One poison entry: the record as text (it may not even be JSON), and why it was refused."""
    event_id = ""
    try:
        doc = ujson.loads(record)
        if isinstance(doc, dict) and isinstance(doc.get("event_id"), str):
            event_id = doc["event_id"]
    except ValueError:
        pass
    return {"set_aside_at": when, "seq": seq, "event_id": event_id, "status": status,
            "message": message[:500], "strikes": strikes, "bytes": len(record),
            "record": record.decode(errors="replace")}


def encode(item: dict[str, Any]) -> bytes:
    return ujson.dumps(item, ensure_ascii=False, escape_forward_slashes=False).encode() + b"\n"


def append(path: str, item: dict[str, Any], max_bytes: int = MAX_BYTES) -> int:
    """Append one entry durably; the number of old entries dropped to stay within ``max_bytes``.

    Raises OSError when the disk refuses (the caller keeps the record in the ring).
    """
    line = encode(item)
    dropped = 0
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        size = 0
    if size + len(line) > max_bytes:
        dropped = _shrink(path, max_bytes // 2 - len(line))
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        if end and os.pread(fd, 1, end - 1) != b"\n":
            line = b"\n" + line     # after a torn append: that fragment stays a line of its own
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return dropped


def read(path: str) -> Iterator[dict[str, Any]]:
    """Every entry, oldest first; a line that does not parse (a torn append) is skipped."""
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    item = ujson.loads(line)
                except ValueError:
                    continue
                if isinstance(item, dict):
                    yield item
    except FileNotFoundError:
        return


def _shrink(path: str, keep_bytes: int) -> int:
    """Rewrite the file with its newest entries totalling at most ``keep_bytes``; how many went."""
    lines = [encode(item) for item in read(path)]
    kept: list[bytes] = []
    total = 0
    for line in reversed(lines):
        if total + len(line) > keep_bytes:
            break
        kept.append(line)
        total += len(line)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, b"".join(reversed(kept)))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return len(lines) - len(kept)
