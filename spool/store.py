"""The spool file as the two threads of the spool process share it.

The intake loop writes (append + one fdatasync per round) and the shipper
thread reads from the head and releases; every ring call goes through here
under one lock. ``report`` queues an event about the spool itself (records
dropped, a record set aside, an I/O error, damage found at open); it never
blocks on the disk, so the shipper may call it at any moment, and the intake
loop turns the queue into events on its next round.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from common.events import EventType
from common.timefmt import format_rfc3339
from spool.ring import Dropped, SpoolRing

Report = tuple[float, EventType, dict[str, Any]]   # (when, event type, data)


def drop_data(d: Dropped) -> dict[str, Any]:
    """The data of one spool.dropped event: how many records and which span of time."""
    return {"dropped": d.count, "first_seq": d.first_seq, "last_seq": d.last_seq,
            "first_ts": format_rfc3339(d.first_ts), "last_ts": format_rfc3339(d.last_ts)}


def merge_drops(prev: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Two spool.dropped reports as one: the count summed, the span from the first to the last."""
    if prev is None:
        return dict(new)
    return {"dropped": prev["dropped"] + new["dropped"], "first_seq": prev["first_seq"],
            "last_seq": new["last_seq"], "first_ts": prev["first_ts"], "last_ts": new["last_ts"]}


def recovery_data(stats: dict[str, Any]) -> dict[str, Any] | None:
    """The data of a spool.recovered event, or None when opening the file found nothing amiss."""
    keys = ("recovery_skipped", "recovery_tail_cut", "header_fallback", "header_lost")
    if not any(stats.get(k) for k in keys):
        return None
    return {k: stats.get(k) for k in (*keys, "recovered_records")}


class Store:
    """The ring behind a lock, opened lazily (and again after a failed open)."""

    def __init__(self, path: str, size: int, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.size = size
        self.clock = clock
        self.lock = threading.Lock()
        self.ring: SpoolRing | None = None
        self.closed = False
        self.changed = threading.Event()   # set after every write: wakes the shipper
        self._reports: deque[Report] = deque()

    @property
    def is_open(self) -> bool:
        return self.ring is not None

    @property
    def max_payload(self) -> int:
        ring = self.ring
        return ring.max_payload if ring is not None else 0

    def open(self) -> dict[str, Any]:
        """Open or create the file (raises SpoolIOError); its stats. Damage found is reported."""
        with self.lock:
            self.ring = SpoolRing.open(self.path, size=self.size, clock=self.clock)
            stats = self.ring.stats()
        data = recovery_data(stats)
        if data is not None:
            self.report("spool.recovered", data)
        return stats

    def write(self, payloads: Sequence[bytes]) -> None:
        """Append and fdatasync (group commit); raises SpoolIOError, after which all must be written again."""
        with self.lock:
            ring = self._ring()
            result = ring.append(payloads)
            # The drop happened even if the sync below fails: report it either way.
            if result.dropped is not None:
                self.report("spool.dropped", drop_data(result.dropped))
            ring.sync()
        self.changed.set()

    def read_unshipped(self, max_records: int, max_bytes: int) -> list[tuple[int, bytes]]:
        with self.lock:
            if self.ring is None or self.closed:
                return []
            return self.ring.read_unshipped(max_records, max_bytes)

    def release(self, upto_seq: int) -> bool:
        """Release shipped records; False once the store is closed (they ship again after a restart)."""
        with self.lock:
            if self.ring is None or self.closed:
                return False
            self.ring.release(upto_seq)
            return True

    def head_seq(self) -> int:
        """The seq of the oldest unshipped record (the ring's head); -1 when not open."""
        with self.lock:
            return self.ring.stats()["head_seq"] if self.ring is not None and not self.closed else -1

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return self.ring.stats() if self.ring is not None and not self.closed else {}

    def free_bytes(self) -> int:
        """Bytes an append can take without dropping anything (0 when not open)."""
        with self.lock:
            return self.ring.stats()["free_bytes"] if self.ring is not None and not self.closed else 0

    def report(self, type: EventType, data: dict[str, Any]) -> None:
        """Queue an event about the spool itself; safe from any thread."""
        self._reports.append((self.clock(), type, data))

    def take_reports(self) -> list[Report]:
        out = []
        while self._reports:
            out.append(self._reports.popleft())
        return out

    def close(self) -> None:
        """Persist the head and sync (may raise SpoolIOError); later reads and releases do nothing."""
        with self.lock:
            self.closed = True
            if self.ring is not None:
                self.ring.close()
        self.changed.set()

    def _ring(self) -> SpoolRing:
        if self.ring is None or self.closed:
            raise ValueError("spool store is not open")
        return self.ring
