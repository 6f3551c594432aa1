"""A blocking call run in a thread of its own and awaited: ``asyncio.to_thread`` without a pool.

The watcher's two blocking calls (a metadata poll round, a contract fetch: http.client with
timeouts) run this way. ``asyncio.to_thread`` would import ``concurrent.futures`` and keep a
pool thread waiting between calls; one short thread per call costs the watcher neither
(docs/footprint.md: +0.21 MiB for the pool against +0.11 in a forked worker, and one thread
fewer at idle). Calls are seconds apart, so a thread's start (tens of microseconds) is
nothing next to the HTTP round trip.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from watcher.asyncio_import import asyncio

T = TypeVar("T")
_running: set[threading.Thread] = set()   # calls not finished yet (join_running)


async def in_thread(name: str, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in a new thread called ``name``; its result or its exception, here.

    Cancelled (the watcher stopping), the call still runs to its end in its thread, as with
    ``to_thread``, and its outcome is dropped; ``join_running`` waits for it, as asyncio.run
    waits for its pool (a drain acknowledgement being sent is not cut off).
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():   # cancelled meanwhile
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]  # None only with an error

    def work() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (fn(*args), None)
        except BaseException as e:  # noqa: BLE001 -- handed to the awaiting task, as to_thread does
            outcome = (None, e)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:   # the loop is closed: nobody waits for this any more
            pass
        finally:
            _running.discard(thread)

    thread = threading.Thread(target=work, name=name)
    _running.add(thread)
    thread.start()
    return await done


def join_running() -> None:
    """Wait for the calls still running in their threads (the event loop has stopped)."""
    for thread in list(_running):
        thread.join()
