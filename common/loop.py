"""The one loop shape of the zmq processes (executor, verifier, spool): build, register, run.

A ``Loop`` is a Poller over registered sockets and file descriptors, each with
its handler, run in the order they were registered. ``run`` turns until the
StopFlag (SIGTERM/SIGINT) or ``until()``: poll for at most ``timeout_ms()``
(adaptive: each process says how soon it must look again; docs/footprint.md
counts the idle wake-ups), run the handlers of what is readable, then
``turn(ready)``, the process's housekeeping. The watcher is asyncio and keeps
its own loop.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmq

from common.runtime import StopFlag

Target = Any     # a zmq socket, or an int file descriptor


def never() -> bool:
    return False


class Loop:
    def __init__(self) -> None:
        self.poller = zmq.Poller()
        self.handlers: dict[Target, Callable[[], None] | None] = {}

    def on(self, target: Target, handler: Callable[[], None] | None = None) -> None:
        """Watch ``target`` for input; ``handler`` runs when it is readable (None: only wakes the loop,
        ``turn`` sees it in ``ready``)."""
        self.poller.register(target, zmq.POLLIN)
        self.handlers[target] = handler

    def once(self, timeout_ms: int) -> set[Target]:
        """One poll and the handlers of what is readable; returns what was."""
        ready = dict(self.poller.poll(timeout_ms))
        for target, handler in self.handlers.items():
            if handler is not None and target in ready:
                handler()
        return set(ready)

    def run(self, stop: StopFlag, turn: Callable[[set[Target]], None], timeout_ms: Callable[[], int],
            until: Callable[[], bool] = never) -> None:
        while not stop.stopping and not until():
            turn(self.once(timeout_ms()))
