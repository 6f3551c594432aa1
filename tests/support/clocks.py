"""Test clocks for the pure cores that take both of the agent's clocks (common.clock)."""
from __future__ import annotations

from common.clock import Moment, MonoTime, WallTime


def at(wall: float, mono: float | None = None) -> Moment:
    """A ``Moment``: ``wall`` on the wall clock and ``mono`` (default: the same number) on the
    monotonic one -- the two agree until a test steps the wall clock."""
    return Moment(WallTime(wall), MonoTime(wall if mono is None else mono))
