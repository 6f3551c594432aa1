"""One throttled log-and-event recorder: every occurrence counted, reports bounded in time.

A peer flooding garbage, a dead controller retried every half second, or a
collector that refuses every POST must not flood the log or the spool, yet
nothing counted may go unsaid. The rule, the same everywhere:

- occurrences are keyed by ``(event type, reason)``; ``reason`` is a bounded
  label, or the message text where the old guard dropped "the same text again";
- the first occurrence of a key is reported at once;
- later ones within ``every_s`` are only counted; ``tick()`` reports what
  accumulated once the window has passed, and ``tick(force=True)`` (at
  shutdown) reports everything still pending;
- a report carries ``count`` (occurrences since the key's last report) and
  ``total`` (since the recorder started).

A pure core: the clock is passed in, and ``say(type, data)`` is the caller's
adapter (a log line, a spool event, a report to the loop thread). It is not
thread-safe: each recorder belongs to one thread.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

# What a recorder's types are: an event type (common.events.EventType) where its reports become
# events, so a misspelt one is a type error at the ``record`` call; any name where they are log lines.
T = TypeVar("T", bound=str)
Key = tuple[T, str]


class Recorder(Generic[T]):
    """Counts occurrences per ``(type, reason)`` and says them at most once per ``every_s`` per key."""

    def __init__(self, say: Callable[[T, dict[str, Any]], None], every_s: float, clock: Callable[[], float] = time.monotonic,
                 limit: int = 256) -> None:
        self.say, self.every_s, self.clock, self.limit = say, every_s, clock, limit
        self.totals: dict[Key[T], int] = {}
        self._reported_at: dict[Key[T], float] = {}
        self._pending: dict[Key[T], tuple[int, dict[str, Any]]] = {}   # key -> (count, latest data)

    def record(self, type_: T, reason: str, data: dict[str, Any] | None = None, n: int = 1,
               now: float | None = None) -> bool:
        """Count ``n`` occurrences; True when they were reported now (first of the key, or window passed).

        ``now`` is for a caller that already holds the time of what it records (else the clock)."""
        key = (type_, reason)
        self.totals[key] = self.totals.get(key, 0) + n
        pending, _ = self._pending.get(key, (0, {}))
        self._pending[key] = (pending + n, dict(data or {}))
        now = self.clock() if now is None else now
        if self._due(key, now):
            self._report(key, now)
            return True
        return False

    def tick(self, force: bool = False, now: float | None = None) -> None:
        """Report every key counted since its last report whose window has passed (all: ``force``)."""
        now = self.clock() if now is None else now
        for key in list(self._pending):
            if force or self._due(key, now):
                self._report(key, now)

    def total(self, type_: T, reason: str) -> int:
        return self.totals.get((type_, reason), 0)

    def forget(self, type_: T, reason: str) -> None:
        """Start the key afresh: its next occurrence is reported at once (e.g. after a recovery)."""
        self._reported_at.pop((type_, reason), None)

    def forget_all(self) -> None:
        """Start every key afresh (a recovery from all failures at once); totals are kept."""
        self._reported_at.clear()

    def _due(self, key: Key[T], now: float) -> bool:
        return now - self._reported_at.get(key, float("-inf")) >= self.every_s

    def _report(self, key: Key[T], now: float) -> None:
        count, data = self._pending.pop(key)
        self._reported_at.pop(key, None)
        self._reported_at[key] = now
        # Bounded memory against a flood of distinct keys: forget the oldest report times
        # (their next occurrence is then said at once, which errs on the side of telling).
        while len(self._reported_at) > self.limit:
            old = next(iter(self._reported_at))
            del self._reported_at[old]
            if old not in self._pending:
                self.totals.pop(old, None)
        self.say(key[0], {**data, "count": count, "total": self.totals[key]})
