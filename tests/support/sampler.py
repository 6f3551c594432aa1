"""What a test watches while the agent works: ``read()`` every ``every_s`` on a thread of its own,
kept in order, until ``stop()`` -- so "the node was never opened" is checked at every moment, not
only before and after."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Sampler(Generic[T]):
    def __init__(self, read: Callable[[], T], every_s: float) -> None:
        self.read, self.every_s = read, every_s
        self.samples: list[T] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.read())
            self._stop.wait(self.every_s)

    def stop(self) -> list[T]:
        self._stop.set()
        self._thread.join(5)
        return self.samples
