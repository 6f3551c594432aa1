"""The agent's two clocks, named so they cannot be mixed (mypy checks every call site).

- ``WallTime``: seconds since the epoch (``time.time()``). Deadlines and timestamps: a notice's
  deadline, the moment a step happened, what goes into a record, an event or another process.
  It may jump: NTP steps it, an operator sets it.
- ``MonoTime``: ``time.monotonic()``. Intervals only: retries, pacing, throttles, timeouts, "tell
  the clients after 2 s", save and publish throttles, "down for 3 s". It never jumps, means
  nothing outside this process and is never written down or compared with a ``WallTime``.

A deadline stays a wall-clock epoch (the provider's moment is a wall-clock moment); what waits a
while waits on the monotonic clock, so a backwards NTP step does not stall it and a clock far
ahead does not end it at once. A pure core that needs both gets a ``Moment``, both read at once.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple, NewType

WallTime = NewType("WallTime", float)
MonoTime = NewType("MonoTime", float)


class Moment(NamedTuple):
    """Now on both clocks, read together (one argument for a core that keeps deadlines and
    intervals)."""

    wall: WallTime
    mono: MonoTime


def wall() -> WallTime:
    return WallTime(time.time())


def mono() -> MonoTime:
    return MonoTime(time.monotonic())


def moment(wall_clock: Callable[[], float] = time.time) -> Moment:
    """Now on both clocks (``wall_clock``: the wall clock a caller was given, e.g. a test's)."""
    return Moment(WallTime(wall_clock()), mono())
