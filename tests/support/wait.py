"""The one wait of the suite: poll for a condition with a deadline, never sleep and hope."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str | Callable[[], str] = "the condition",
             interval: float = 0.05, retry_on: tuple[type[Exception], ...] = (Exception,)) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); TimeoutError at the deadline.

    The one wait of the suite: every test that reads a log, file, counter or request list that
    another thread or process fills waits here for what it asserts, never sleeps and hopes.
    ``what`` names the condition in the error (a callable is asked only then, for the last state).
    A predicate that raises one of ``retry_on`` is retried (the thing may not be up yet; the last
    error is reported); anything else propagates at once -- e.g. "the process exited".
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    value: T | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last_error = None
        except retry_on as e:
            last_error = e
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    desc = what() if callable(what) else what
    detail = f"last error: {last_error!r}" if last_error else f"last value: {value!r:.300}"
    raise TimeoutError(f"timed out after {timeout}s waiting for {desc} ({detail})")


def at_least(n: int, items: Callable[[], list[T]]) -> Callable[[], list[T] | None]:
    """A wait_for predicate: ``items()`` once it holds ``n`` or more (the caller asserts the exact list)."""
    def enough() -> list[T] | None:
        found = items()
        return found if len(found) >= n else None
    return enough
