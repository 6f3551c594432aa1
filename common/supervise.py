"""Worker threads that never die silently: restarted after a growing pause, every restart counted.

A long-lived worker thread (the verifier's read of the scheduler, the executor's pod watch, a
GCP long poll) handles the failures it knows of (a server down, a refusal) in its own loop. An
exception it does not expect -- a bug, an input shape nobody foresaw -- used to end the thread,
and the process lived on without it: every later verdict ``unverified``, a pod view frozen, with
nothing said. ``Supervised`` runs the body again instead, after a pause that doubles with each
crash in a row (``FIRST_PAUSE_S`` up to ``MAX_PAUSE_S``; a run of ``HEALTHY_AFTER_S`` without one
starts the count afresh), so a body that fails at once on every start costs a few wake-ups a
minute, not a spinning core. A body that returns while not asked to stop is a dead worker too,
and is restarted the same way.

Each restart is kept as a ``Crash`` for the owner's loop to say (``report``: one log line and an
``agent.thread_restarted`` event each; only the loop's thread writes the log and the spool), and
``restarts`` counts them all. ``on_crash`` runs in the worker's thread at once, for a worker whose
last result must not outlive it (the verifier's read turns into a failed read).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from common.events import EventSink
    from common.log import Logger

FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 30.0
HEALTHY_AFTER_S = 60.0
KEEP = 32            # crashes kept for the loop to say; beyond that, counted in ``unsaid``
ERROR_CHARS = 300


@dataclass(frozen=True, slots=True)
class Crash:
    """One unexpected end of a worker's body, and when it runs again."""

    thread: str
    error: str       # "<exception type>: <message>", or "returned" for a body that ended by itself
    restarts: int    # this worker's restarts so far, this one included
    pause_s: float   # how long it waits before running the body again


def pause_for(crashes_in_a_row: int, first_s: float = FIRST_PAUSE_S, max_s: float = MAX_PAUSE_S) -> float:
    """The pause before restart number ``crashes_in_a_row`` of a streak (1: the first)."""
    return min(max_s, first_s * 2.0 ** min(max(crashes_in_a_row - 1, 0), 32))


class Supervised:
    """``body(stopping)`` in a daemon thread called ``name``, run again whenever it raises or returns
    before ``stop()``. The body must return soon after ``stopping`` is set."""

    def __init__(self, name: str, body: Callable[[threading.Event], None], *,  # noqa: PLR0913 -- the pacing, by name
                 on_crash: Callable[[Crash], None] | None = None, first_s: float = FIRST_PAUSE_S,
                 max_s: float = MAX_PAUSE_S, healthy_after_s: float = HEALTHY_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._body, self._on_crash = body, on_crash
        self._first_s, self._max_s, self._healthy_after_s = first_s, max_s, healthy_after_s
        self._clock = clock
        self.stopping = threading.Event()
        self.restarts = 0
        self.unsaid = 0                  # crashes dropped from ``_crashes`` unsaid (counted in ``restarts``)
        self._crashes: list[Crash] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> Supervised:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()

    def join(self, timeout_s: float | None = None) -> bool:
        """True if the thread has ended (or never started)."""
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def take_crashes(self) -> list[Crash]:
        """The crashes since the last call, oldest first (from any thread)."""
        with self._lock:
            out, self._crashes = self._crashes, []
        return out

    def _main(self) -> None:
        in_a_row = 0
        while not self.stopping.is_set():
            started = self._clock()
            try:
                self._body(self.stopping)
            except Exception as e:  # noqa: BLE001 -- the point: whatever ended the body, it runs again
                error = f"{type(e).__name__}: {e}"[:ERROR_CHARS]
            else:
                if self.stopping.is_set():
                    return
                error = "returned"
            in_a_row = 1 if self._clock() - started >= self._healthy_after_s else in_a_row + 1
            self.restarts += 1
            crash = Crash(self.name, error, self.restarts, pause_for(in_a_row, self._first_s, self._max_s))
            with self._lock:
                self._crashes.append(crash)
                if len(self._crashes) > KEEP:
                    del self._crashes[0]
                    self.unsaid += 1
            if self._on_crash is not None:
                try:
                    self._on_crash(crash)
                except Exception:  # noqa: BLE001, S110 -- a failing hook must not end the supervisor
                    pass
            self.stopping.wait(crash.pause_s)


def report(worker: Supervised, log: Logger, emit: EventSink | None = None) -> int:
    """Say the worker's crashes since the last call (log line, and event with ``emit``); how many.
    Call it from the thread that owns the log and the spool link (the process's loop)."""
    crashes = worker.take_crashes()
    for c in crashes:
        say(c, log, emit)
    return len(crashes)


def say(crash: Crash, log: Logger, emit: EventSink | None = None) -> None:
    """One restart: an ``agent.thread_restarted`` log line, and the event with ``emit``."""
    data = {"thread": crash.thread, "error": crash.error, "restarts": crash.restarts, "pause_s": crash.pause_s}
    log.error("agent.thread_restarted", **data)
    if emit is not None:
        emit("agent.thread_restarted", data=data)
