"""A process's durable outbox: every event on disk before ``emit`` returns, until the spool acks it.

Without it an event lives only in the emitting process's memory until the
spool acknowledges it; a SIGKILL in that moment loses it. With it,
``SpoolLink.emit`` appends the event as one line of JSON and fsyncs before it
sends, and a restarted process replays every event it finds here (same
event_id, source and seq), so "emitted" means "will reach the spool". The
spool acknowledges a replay of an event it already holds without writing it
twice (spool.intake's recent ids, seeded from the spool file at start).

Acks are not written: the file is emptied when nothing is pending, and
rewritten (temp file, fsync, rename) with only the pending events when it has
grown past twice their size. An event acked but still here after a crash is
replayed once more, which the spool dedupes. The size of what is pending is a
running count (each line's length kept from its append until its ack), so the
decision after each ack batch costs nothing however long the backlog; only a
rewrite encodes the pending events, and a rewrite happens only once the file is
twice what it keeps, so over a backlog drained in small batches they add up to
about twice the backlog, not its square.

The file is under ``paths.state_dir`` (``outbox/<process>.journal``), never the
runtime dir, which systemd deletes when the unit stops. One process owns it
(an exclusive flock); a second one with the same name gets no journal and
says so. Damage never stops a process: a torn last line (the crash came mid
append, before ``emit`` returned) is ignored; a line that does not parse is
skipped and counted; a disk that refuses the append leaves the event in memory
only, counted -- ``errors`` lists what happened, for the owner to log and emit.
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

import ujson

JOURNAL_DIR = "outbox"
# Past this the file is rewritten with only what is pending (bounded by the Outbox's limit).
COMPACT_MIN_BYTES = 256 << 10
# Past this, even with no ack coming (the spool down for long), the file is rewritten with only the
# pending events: the Outbox's limit (10,000 events, ~5 MB) then bounds it.
MAX_BYTES = 16 << 20


def journal_path(state_dir: str, process: str) -> str:
    return os.path.join(state_dir, JOURNAL_DIR, f"{process}.journal")


def encode(event: dict[str, Any]) -> bytes:
    return ujson.dumps(event, ensure_ascii=False, escape_forward_slashes=False).encode() + b"\n"


def is_event(value: object) -> TypeGuard[dict[str, Any]]:
    """An event as the journal (or a state file that saves events with it) keeps it: what a resend
    needs, its id and type, is there."""
    return isinstance(value, dict) and isinstance(value.get("event_id"), str) and isinstance(value.get("type"), str)


def parse(data: bytes) -> tuple[list[dict[str, Any]], int, bool, dict[str, int]]:
    """(events, lines that are not events, a torn last line, each event's line length with its
    newline by event_id) of a journal's bytes."""
    lines = data.split(b"\n")
    torn = bool(lines[-1])          # no newline after it: the append never finished
    events, bad = [], 0
    lengths: dict[str, int] = {}
    for line in lines[:-1]:
        if not line.strip():
            continue
        try:
            ev = ujson.loads(line)
        except ValueError:
            bad += 1
            continue
        if is_event(ev):
            events.append(ev)
            lengths[ev["event_id"]] = lengths.get(ev["event_id"], 0) + len(line) + 1
        else:
            bad += 1
    return events, bad, torn, lengths


class Journal:
    """Append-and-fsync log of unacknowledged events; ``replayed`` holds what a previous run left.

    ``pending_bytes`` is what the events in the file not yet acked (``acked``) take of it: each
    line's length is kept by event_id from its append (or the load, or a rewrite) to its ack. An
    event the Outbox gave up (its limit) or never journalled is not acked through here; the count
    then errs high, which only delays a compaction (``bound`` still caps the file), and the next
    rewrite or emptying counts afresh from what is really pending.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1
        self.size = 0
        self.pending_bytes = 0
        self._lengths: dict[str, int] = {}   # event_id -> its line's bytes, while in the file and unacked
        self.errors: list[dict[str, Any]] = []   # taken by the owner: logged and emitted
        self.replayed: list[dict[str, Any]] = []
        self.failed_appends = 0
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            self._error("open", e)
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self.fd)
            self.fd = -1
            self._error("locked", e)
            return
        self._load()

    @property
    def active(self) -> bool:
        return self.fd >= 0

    def append(self, event: dict[str, Any]) -> bool:
        """Durably record one event (one write, one fdatasync); False if the disk refused."""
        if self.fd < 0:
            return False
        line = encode(event)
        try:
            os.pwrite(self.fd, line, self.size)
            os.fdatasync(self.fd)
        except OSError as e:
            self.failed_appends += 1
            if self.failed_appends == 1:     # once per episode; the count goes with the next report
                self._error("append", e)
            try:
                os.ftruncate(self.fd, self.size)   # no half line left behind for the next append
            except OSError:
                pass
            return False
        if self.failed_appends:
            self.errors.append({"op": "append_recovered", "failed_appends": self.failed_appends,
                                "path": self.path})
            self.failed_appends = 0
        self.size += len(line)
        self._count(event["event_id"], len(line))
        return True

    def acked(self, event_ids: Iterable[str]) -> None:
        """The spool has these: their lines no longer count as pending (an unknown id is ignored)."""
        for eid in event_ids:
            self.pending_bytes -= self._lengths.pop(eid, 0)

    def settle(self, pending: Mapping[str, tuple[float, dict[str, Any]]]) -> None:
        """After acks (``pending``: the Outbox's, told to ``acked`` first): empty the file when nothing
        is pending; rewrite it with only the pending events when it has grown past twice their size.
        The decision is O(1) (``pending_bytes``); only a rewrite walks ``pending``."""
        if self.fd < 0 or not self.size:
            return
        try:
            if not pending:
                os.ftruncate(self.fd, 0)
                self.size = 0
                self._lengths, self.pending_bytes = {}, 0
            elif self.size > COMPACT_MIN_BYTES and self.size > 2 * self.pending_bytes:
                self._rewrite([ev for _, ev in pending.values()])
        except OSError as e:
            self._error("compact", e)

    def bound(self, pending: Mapping[str, tuple[float, dict[str, Any]]]) -> None:
        """Keep the file within MAX_BYTES: rewrite it with the pending events only."""
        if self.fd < 0 or self.size <= MAX_BYTES:
            return
        try:
            self._rewrite([ev for _, ev in pending.values()])
        except OSError as e:
            self._error("compact", e)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _load(self) -> None:
        try:
            st = os.fstat(self.fd)
            data = os.pread(self.fd, st.st_size, 0) if st.st_size else b""
        except OSError as e:
            self._error("read", e)
            data = b""
        events, bad, torn, self._lengths = parse(data)
        self.pending_bytes = sum(self._lengths.values())
        self.size = len(data)
        if bad:
            self.errors.append({"op": "corrupt", "path": self.path, "bad_lines": bad,
                                "replayed": len(events)})
        if torn or bad:
            # Start from a clean file holding only the good events: no fragment ahead of new appends.
            try:
                self._rewrite(events)
            except OSError as e:
                self._error("repair", e)
        self.replayed = events

    def _rewrite(self, events: list[dict[str, Any]]) -> None:
        """Crash-safe: the new file is whole on disk before it replaces the old one, so a crash at any
        point leaves one or the other, each line once (the old one may still hold acked events)."""
        lines = [encode(e) for e in events]
        body = b"".join(lines)
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, body)
            os.fsync(fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        os.replace(tmp, self.path)
        os.close(self.fd)
        self.fd, self.size = fd, len(body)
        self._lengths, self.pending_bytes = {}, 0
        for ev, line in zip(events, lines, strict=True):
            self._count(ev["event_id"], len(line))
        _fsync_dir(os.path.dirname(self.path))

    def _count(self, event_id: str, nbytes: int) -> None:
        self._lengths[event_id] = self._lengths.get(event_id, 0) + nbytes
        self.pending_bytes += nbytes

    def _error(self, op: str, e: OSError) -> None:
        self.errors.append({"op": op, "path": self.path, "errno": e.errno, "error": str(e)[:300]})


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
