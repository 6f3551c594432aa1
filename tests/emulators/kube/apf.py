"""API Priority and Fairness in miniature: one priority level's seats and queue (``Options.apf_*``).

As the real server's APF does for a limited priority level (Kubernetes docs, "API Priority and
Fairness": concurrency limit, queuing, ``queueLengthLimit``): a request executes when a seat is
free and holds it while it executes; when every seat is taken it waits in the queue; when the
queue is full too it is rejected at once -- on 1.20.2 with 429, ``Retry-After: 1`` and a
plain-text body (``client.APF_REJECTION_BODY``, pinned by tests/rigs/test_kube_flowschema.py).
Watches are long-running requests and are not limited here (1.20 exempts them). A request
executes for ``service_s`` at least (the server's own work, emulated), so the seats bound the
rate: a client that keeps more requests in flight than the level has seats only queues them,
or gets rejections.
"""
from __future__ import annotations

import threading
import time


class SeatLimit:
    """``seats`` requests execute at once, ``queue`` more wait; past that, reject."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = 0
        self._waiting = 0
        self.rejected = 0

    def enter(self, seats: int, queue: int, wait_s: float) -> bool:
        """Take a seat (waiting in the queue up to ``wait_s``); False: rejected."""
        with self._cond:
            if self._busy < seats:
                self._busy += 1
                return True
            if self._waiting >= queue:
                self.rejected += 1
                return False
            self._waiting += 1
            try:
                seated = self._cond.wait_for(lambda: self._busy < seats, wait_s)
            finally:
                self._waiting -= 1
            if not seated:
                self.rejected += 1
                return False
            self._busy += 1
            return True

    def leave(self, held_since: float, service_s: float) -> None:
        """The request is done; it held its seat for ``service_s`` at least."""
        rest = held_since + service_s - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        with self._cond:
            self._busy -= 1
            self._cond.notify()
