"""Pure decisions of the shipper: how long to back off, and how to find a bad record.

Vector's http_server source answers 2xx once the batch is delivered (with
end-to-end acknowledgements on: once Kafka has it). 5xx, 429 and no answer
mean "later": back off, capped, with jitter so a fleet does not retry in step.
Any other 4xx means something in the batch is unacceptable: split the batch in
halves until the one bad record is alone, set it aside, ship the rest.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0


def backoff_s(failures: int, rng: random.Random, base: float = BACKOFF_BASE_S, cap: float = BACKOFF_CAP_S) -> float:
    """'Full jitter' exponential backoff: uniform in [0, min(cap, base * 2**failures)]."""
    ceiling = min(cap, base * (2 ** min(failures, 30)))
    return rng.uniform(ceiling / 2, ceiling)


def classify(status: int | None) -> str:
    """retry | ok | reject, from an HTTP status (None: no answer at all)."""
    if status is None or status == 429 or status >= 500 or status == 408:
        return "retry"
    if 200 <= status < 300:
        return "ok"
    return "reject"


@dataclass(slots=True)
class Bisect:
    """Finds the records a server rejects by shipping halves of a rejected batch.

    Feed it the rejected batch's length; ``next_range`` says which slice to
    send; ``result(ok)`` reports the answer. Records proven bad are listed in
    ``bad``; the rest were delivered along the way.
    """

    start: int
    end: int
    stack: list[tuple[int, int]]
    bad: list[int]

    @classmethod
    def of(cls, n: int) -> Bisect:
        mid = n // 2
        stack = [(mid, n), (0, mid)] if n > 1 else [(0, n)]
        return cls(0, n, stack, [])

    def next_range(self) -> tuple[int, int] | None:
        return self.stack[-1] if self.stack else None

    def result(self, ok: bool) -> None:
        lo, hi = self.stack.pop()
        if ok:
            return
        if hi - lo == 1:
            self.bad.append(lo)
            return
        mid = (lo + hi) // 2
        self.stack += [(mid, hi), (lo, mid)]
