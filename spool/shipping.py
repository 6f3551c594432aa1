"""Pure decisions of the shipper: where to ship, what an answer means, how long to back off,
and how to find the record a server refuses.

Vector's http_server source answers 2xx once the batch is delivered (with
end-to-end acknowledgements on: once Kafka has it). Its other answers, as
deploy/vector/vector.toml sets it up:

- 5xx, 429, 408, or no answer at all: "later" -- back off (capped, jittered, so
  a fleet does not retry in step) and send the same batch again.
- 400, 413, 422: something in *this batch* is unacceptable ("Contents failed to
  deliver to sink", a body that does not decode, a line over the limit). The
  same batch can never succeed: split it in halves until each bad record is
  alone, set those aside, ship the rest.
- Any other 4xx (404 wrong path, 405, 401/403, 415...) says the *endpoint* is
  wrong, not the records: splitting would set every record aside and lose the
  lot to a typo in a URL, so it is retried like an outage until someone fixes
  the configuration.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

BACKOFF_BASE_S = 0.5
# 5,000 nodes retrying a recovering Vector every 30 s at most is ~170 requests/s: gentle.
BACKOFF_CAP_S = 30.0
# The kafka sink's message_timeout_ms is 30 s: with end-to-end acknowledgements
# Vector may legitimately hold the answer that long (and then answer 500). A
# shorter timeout would give up on batches Kafka is about to take (duplicates)
# and, with Kafka slow, never see a 2xx at all. 15 s on top covers Vector's own
# queueing (its batch.timeout_secs, a blocked memory buffer) and the transfer.
SHIP_TIMEOUT_S = 45.0
REJECT_STATUSES = frozenset({400, 413, 422})


@dataclass(frozen=True, slots=True)
class ShipPolicy:
    """How long one POST may take, and how retries back off (the tests shorten all three)."""

    timeout_s: float = SHIP_TIMEOUT_S
    backoff_base_s: float = BACKOFF_BASE_S
    backoff_cap_s: float = BACKOFF_CAP_S


def backoff_s(failures: int, rng: random.Random, base: float = BACKOFF_BASE_S, cap: float = BACKOFF_CAP_S) -> float:
    """'Equal jitter' exponential backoff: uniform in [c/2, c], c = min(cap, base * 2**failures).

    Never near zero (a dead Vector is not hammered), never in step across a fleet.
    """
    ceiling = min(cap, base * (2 ** min(failures, 30)))
    return rng.uniform(ceiling / 2, ceiling)


def classify(status: int | None) -> str:
    """retry | ok | reject, from an HTTP status (None: no answer at all)."""
    if status is not None and 200 <= status < 300:
        return "ok"
    if status in REJECT_STATUSES:
        return "reject"
    return "retry"


def retry_after_s(value: str | None, cap: float = BACKOFF_CAP_S) -> float | None:
    """A Retry-After header in delta-seconds, capped; None when absent or an HTTP date."""
    if value is None or not (value.strip().isascii() and value.strip().isdigit()):
        return None
    return min(float(value.strip()), cap)


def choose_sink(config_url: str, contract_url: str | None) -> str | None:
    """The URL to ship to: the contract's sink_url when it names one, else the node's configuration."""
    return contract_url or config_url or None


@dataclass(slots=True)
class Bisect:
    """Finds the records a server rejects by shipping halves of a rejected batch.

    Feed it the rejected batch's length; ``next_range`` says which slice to
    send; ``result(ok)`` reports the answer. Records proven bad are listed in
    ``bad``; the rest were delivered along the way, in order (the left half
    always goes first).
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
