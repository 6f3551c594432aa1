"""Pure decisions of the shipper: where to ship, what an answer means, how long to back off,
and how to find the record a server refuses. No I/O; the clock and the randomness are passed in.

Vector's http_server source (deploy/vector/vector.toml) answers a batch, with
end-to-end acknowledgements on, from ``handle_batch_status`` and the source's
own decoding (vectordotdev/vector, src/sources/util/http/prelude.rs,
src/sources/util/http/encoding.rs, src/sources/http_server.rs):

- 200: delivered (to Kafka).
- 400 "Contents failed to deliver to sink" (BatchStatus::Rejected) and 500
  "Error delivering contents to sink" (BatchStatus::Errored): the *sink* failed.
  The kafka sink's delivery timeout is a Rejected: its service call errs and
  the stream driver marks the batch Rejected (lib/vector-core/src/stream/driver.rs).
  Neither says anything about the records, so every record is kept and the
  same batch is sent again after a backoff: ``later``. So are 5xx, 429, 408,
  timeouts and refused connections.
- 400 "Failed decoding body: ..." (the codec refused a frame), 422 "Failed
  decompressing payload with <enc> decoder.", and 413 past a body limit: the
  *content* of this request is refused: ``refused``. The batch is split until
  the record refused alone is found; only a record refused alone, again and
  again (``POISON_STRIKES`` times), is set aside -- counted and kept readable,
  never silently gone.
- Anything else (404 wrong path, 405, 401/403, 415 an encoding we never send,
  a 400 with a message we do not know) says the endpoint or the peer is not
  what we think, not that the records are bad: ``later``, until someone fixes
  the configuration. Unknown answers never cost a record.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ujson

BACKOFF_BASE_S = 0.5
# 5,000 nodes retrying a recovering Vector every 30 s at most is ~170 requests/s: gentle.
BACKOFF_CAP_S = 30.0
# The kafka sink's message_timeout_ms is 30 s: with end-to-end acknowledgements
# Vector may legitimately hold the answer that long (and then answer 400). A
# shorter timeout would give up on batches Kafka is about to take (duplicates)
# and, with Kafka slow, never see a 2xx at all. 15 s on top covers Vector's own
# queueing (its batch.timeout_secs, a blocked memory buffer) and the transfer.
SHIP_TIMEOUT_S = 45.0
# A record is set aside only once Vector refused it alone this many times, with
# a backoff between: one odd answer never costs a record.
POISON_STRIKES = 3

SINK_MESSAGES = ("Contents failed to deliver to sink", "Error delivering contents to sink")
DECODE_MESSAGES = ("Failed decoding body", "Failed decompressing payload")
OK, LATER, REFUSED = "ok", "later", "refused"


@dataclass(frozen=True, slots=True)
class ShipPolicy:
    """How long one POST may take, and how retries back off (the tests shorten them)."""

    timeout_s: float = SHIP_TIMEOUT_S
    backoff_base_s: float = BACKOFF_BASE_S
    backoff_cap_s: float = BACKOFF_CAP_S
    poison_strikes: int = POISON_STRIKES


def backoff_s(failures: int, rng: random.Random, base: float = BACKOFF_BASE_S, cap: float = BACKOFF_CAP_S) -> float:
    """'Full jitter' exponential backoff: uniform in [0, c], c = min(cap, base * 2**failures).

    A fleet that lost Vector together does not come back in step (the AWS
    architecture blog's comparison: full jitter spreads retries the most for
    the least total work).
    """
    ceiling = min(cap, base * (2 ** min(failures, 30)))
    return rng.uniform(0.0, ceiling)


@dataclass(slots=True)
class Backoff:
    """A failing streak: how long to wait before the next attempt, and since when it fails."""

    rng: random.Random
    clock: Callable[[], float]
    base: float = BACKOFF_BASE_S
    cap: float = BACKOFF_CAP_S
    failures: int = 0
    since: float = 0.0

    def next_delay(self, retry_after: float | None = None) -> float:
        if not self.failures:
            self.since = self.clock()
        delay = backoff_s(self.failures, self.rng, self.base, self.cap)
        if retry_after is not None:
            delay = max(delay, retry_after)
        self.failures += 1
        return delay

    def reset(self) -> tuple[int, float]:
        """End the streak: (failed attempts, seconds it lasted)."""
        out = (self.failures, self.clock() - self.since if self.failures else 0.0)
        self.failures = 0
        return out


def message_of(body: bytes) -> str:
    """The ``message`` of Vector's ErrorMessage body ``{"code": .., "message": ..}``, else the text."""
    try:
        doc: Any = ujson.loads(body)
    except ValueError:
        return body[:300].decode(errors="replace")
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return str(doc["message"])
    return body[:300].decode(errors="replace")


def classify(status: int | None, message: str = "") -> str:
    """ok | later | refused, from an HTTP status (None: no answer at all) and the error's message."""
    if status is not None and 200 <= status < 300:
        return OK
    if status in {413, 422}:
        return REFUSED
    if status == 400 and message.startswith(DECODE_MESSAGES):
        return REFUSED
    return LATER


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
    """Finds the records a server refuses by shipping halves of a refused batch.

    Feed it the refused batch's length; ``next_range`` says which slice to
    send; ``result(ok)`` reports the answer. A single record refused is
    retried alone until it has ``strikes`` refusals, and only then listed in
    ``bad``; the rest were delivered along the way, in order (the left half
    always goes first). Sink-side answers ("later") are not results: the
    caller backs off and sends the same slice again.
    """

    start: int
    end: int
    stack: list[tuple[int, int]]
    bad: list[int]
    strikes: int = POISON_STRIKES
    refusals: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, n: int, strikes: int = POISON_STRIKES) -> Bisect:
        mid = n // 2
        stack = [(mid, n), (0, mid)] if n > 1 else [(0, n)]
        return cls(0, n, stack, [], strikes)

    def next_range(self) -> tuple[int, int] | None:
        return self.stack[-1] if self.stack else None

    def result(self, ok: bool) -> None:
        lo, hi = self.stack[-1]
        if ok:
            self.stack.pop()
            return
        if hi - lo == 1:
            self.refusals[lo] = self.refusals.get(lo, 0) + 1
            if self.refusals[lo] >= self.strikes:
                self.stack.pop()
                self.bad.append(lo)
            return
        self.stack.pop()
        mid = (lo + hi) // 2
        self.stack += [(mid, hi), (lo, mid)]

    def retrying_alone(self) -> bool:
        """Is the next slice a single record already refused (so the caller backs off first)?"""
        span = self.next_range()
        return span is not None and span[1] - span[0] == 1 and self.refusals.get(span[0], 0) > 0
