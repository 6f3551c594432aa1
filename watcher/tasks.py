"""The watcher's loops (relay, metadata poll, tick, contract refresh) run again when one raises.

An exception a loop does not expect -- a bug, a relay payload or a contract bundle nobody foresaw
-- used to end the watcher (exit 1) so that supervisord would start a fresh one; but a fresh one
met the same bundle or payload at once, and the node's only ears were in a crash loop. Now the
loop alone starts again, after the pause ``common.supervise`` gives a thread (0.5 s doubling to
30 s while it keeps failing), each restart said as ``agent.thread_restarted`` (log line and
event), while the other loops go on. A loop that returns is done (relay or metadata not
configured), as before.
"""
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from common.supervise import ERROR_CHARS, HEALTHY_AFTER_S, Crash, pause_for, say
from watcher.asyncio_import import asyncio

if TYPE_CHECKING:
    from common.events import EventSink
    from common.log import Logger


async def supervised(name: str, loop: Callable[[], Awaitable[object]], stop: asyncio.Event, log: Logger,
                     emit: EventSink) -> None:
    """``await loop()`` until it returns or ``stop`` is set, again after a pause whenever it raises."""
    restarts = in_a_row = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            await loop()
            return
        except Exception as e:  # noqa: BLE001 -- the point: whatever ended the loop, it runs again
            error = f"{type(e).__name__}: {e}"[:ERROR_CHARS]
        in_a_row = 1 if time.monotonic() - started >= HEALTHY_AFTER_S else in_a_row + 1
        restarts += 1
        crash = Crash(name, error, restarts, pause_for(in_a_row))
        say(crash, log, emit)
        try:
            await asyncio.wait_for(stop.wait(), timeout=crash.pause_s)
        except TimeoutError:
            pass
