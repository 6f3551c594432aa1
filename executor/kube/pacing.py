"""How hard the agent leans on the API server (pure: no I/O, clock and random passed in).

A hall reclaim makes hundreds of agents call one API server in the same second,
so every wait is decided here, where it can be tested without a server:

- ``classify_429``: a 429 is either a PodDisruptionBudget refusing an eviction
  (a Status whose ``details.causes`` carry reason ``DisruptionBudget``) or API
  Priority and Fairness shedding load (1.20 answers ``Retry-After: 1`` and a
  plain-text body, "Too many requests, please try again later."; newer servers
  a Status without that cause). They mean different things: a budget frees up
  when a replacement pod turns Ready, so it is retried soon and counts towards
  escalation at the cutoff; throttling says nothing about the pod, so it is
  retried only after the server's Retry-After and never escalates.
- ``throttled_delay`` / ``refused_delay``: the two retry policies. Both honour
  Retry-After (never retry earlier than the server asked) and add jitter, so
  agents throttled together do not come back together.
- ``error_delay``: no answer, or an error that is neither: from ``ERROR_FIRST_S``, doubling
  while it lasts up to ``ERROR_MAX_S``, with jitter (a watch that cannot reconnect, a
  withdrawal's uncordon that keeps failing), so a hall of agents that lost the server at
  once does not come back in lock-step.
- ``ConcurrencyLimit``: how many evictions the drain keeps in flight, adapted to
  what the server says (additive increase, multiplicative decrease, as TCP's
  congestion avoidance, RFC 5681): an APF rejection halves it, an answer far
  slower than the fastest recent ones (the server queueing it) or none at all
  cuts it by a fifth, at most once per round trip (answers to requests sent
  before the last cut say nothing new); every other answer adds a jittered
  ``1 / limit`` (about one more per round trip), up to the drain's workers. A
  PDB refusal is a fast answer from a healthy server: it counts as one.
- ``eviction_spread_delay``: the agents of one hall cordon at once (one small
  PATCH each, the write that stops new work landing) and spread the start of
  their evictions over ``spread_s`` by a hash of the node name: deterministic
  (a node always gets the same slot, so a restart does not move it) and
  uniform over the hall without any coordination.
"""
from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

PDB_REFUSAL, THROTTLED = "pdb", "throttled"
DISRUPTION_BUDGET = "DisruptionBudget"   # the cause reason of the eviction REST handler's 429

THROTTLE_DEFAULT_S = 1.0    # APF's own Retry-After (1 s): used when a 429 carries none
THROTTLE_MAX_S = 8.0        # repeated throttling backs off exponentially up to this
THROTTLE_JITTER = 0.5       # up to +50 % of the wait, drawn per retry
REFUSED_FIRST_S = 0.1       # a PDB refusal: exponential from 0.1 s ...
REFUSED_MAX_S = 2.0         # ... at most 2 s; the drain also retries when a pod of the lane leaves
REFUSED_JITTER = 0.25
ERROR_FIRST_S = 0.5         # no answer / an error: exponential from 0.5 s ...
ERROR_MAX_S = 8.0           # ... at most 8 s
ERROR_JITTER = 0.5
LANE_WAKE_S = 0.2           # that long after a pod left (the disruption controller's turn first)
RETRY_AFTER_MAX_S = 60.0    # a Retry-After beyond this is not believed (the notice is shorter)


def retry_after_s(value: str | None) -> float | None:
    """The Retry-After header in seconds (the API server sends delta-seconds), or None if absent or
    not a number; clamped to [0, RETRY_AFTER_MAX_S]. An HTTP-date is not used by kube-apiserver."""
    if value is None:
        return None
    text = value.strip()
    if not text.isascii() or not text.isdigit():
        return None
    return min(float(text), RETRY_AFTER_MAX_S)


def status_causes(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    details = doc.get("details")
    if not isinstance(details, dict):
        return []
    return [c for c in details.get("causes") or [] if isinstance(c, dict)]


def classify_429(doc: Mapping[str, Any]) -> str:
    """PDB_REFUSAL if the 429's Status names a disruption budget, else THROTTLED (APF, or any
    other limiter in front of the server: none of them says anything about the pod)."""
    if any(c.get("reason") == DISRUPTION_BUDGET for c in status_causes(doc)):
        return PDB_REFUSAL
    return THROTTLED


def _jittered(base: float, spread: float, rand: Callable[[], float]) -> float:
    return base * (1.0 + spread * min(1.0, max(0.0, rand())))


def throttled_delay(attempts: int, retry_after: float | None, rand: Callable[[], float]) -> float:
    """Wait after the ``attempts``-th throttled answer in a row: at least the server's Retry-After
    (1 s if none), doubling with every further throttle up to THROTTLE_MAX_S, plus jitter."""
    floor = THROTTLE_DEFAULT_S if retry_after is None else max(retry_after, 0.0)
    base = max(floor, min(THROTTLE_MAX_S, THROTTLE_DEFAULT_S * 2.0 ** max(0, attempts - 1)))
    return _jittered(base, THROTTLE_JITTER, rand)


def refused_delay(attempts: int, retry_after: float | None, rand: Callable[[], float]) -> float:
    """Wait after the ``attempts``-th PDB refusal of a pod: exponential from 0.1 s, at most 2 s
    (kubectl's fixed 5 s wastes most of a short notice; the runner retries sooner when a pod of
    the lane leaves, see ``EvictionBook.observe``), but never before a Retry-After the server set
    (1.20 sets none; newer servers say 10 s), plus jitter."""
    base = min(REFUSED_MAX_S, REFUSED_FIRST_S * 2.0 ** max(0, attempts - 1))
    if retry_after:
        base = max(base, retry_after)
    return _jittered(base, REFUSED_JITTER, rand)


def error_delay(attempts: int, rand: Callable[[], float]) -> float:
    """Wait after the ``attempts``-th failure in a row (no answer, or an error): exponential from
    ERROR_FIRST_S up to ERROR_MAX_S, plus up to ERROR_JITTER of it."""
    base = min(ERROR_MAX_S, ERROR_FIRST_S * 2.0 ** max(0, attempts - 1))
    return _jittered(base, ERROR_JITTER, rand)


def eviction_spread_delay(node: str, spread_s: float) -> float:
    """The node's slot in [0, spread_s): a hash of its name, so the agents of a hall noticed in the
    same second start evicting over ``spread_s`` instead of in one burst, each at the same offset
    every time (the cordon before it is not delayed)."""
    if spread_s <= 0:
        return 0.0
    digest = hashlib.blake2b(node.encode("utf-8"), digest_size=8).digest()
    return spread_s * (int.from_bytes(digest, "big") / 2.0 ** 64)


AIMD_THROTTLED = 0.5        # an APF 429 halves the evictions in flight ...
AIMD_SLOW = 0.8             # ... a slow answer (or none) cuts them by a fifth
AIMD_JITTER = 0.5           # the additive step is 1/limit times [0.75, 1.25): agents do not climb in step
SLOW_FACTOR = 3.0           # an answer this many times slower than the fastest of the last ...
SLOW_WINDOW = 32            # ... this many answers, and
SLOW_FLOOR_S = 0.5          # slower than this at all, is the server queueing it (APF holds a request
                            # in its queue before it executes, kube-apiserver's handler then takes ms)


class ConcurrencyLimit:
    """The drain's evictions in flight, adapted to the server's answers (pure: times and random
    draws passed in). ``slots()``: how many may be in flight now; ``answered`` each answer."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = max(1, ceiling)
        self.limit = float(self.ceiling)     # a server that has said nothing yet gets the workers
        self.cut_at = float("-inf")          # monotonic time of the last decrease
        self.cuts = 0
        self._fast: deque[float] = deque(maxlen=SLOW_WINDOW)

    def cap(self, ceiling: int) -> None:
        """At most ``ceiling`` (the drain's workers), whatever the answers say."""
        self.ceiling = max(1, ceiling)
        self.limit = min(self.limit, float(self.ceiling))

    def slots(self) -> int:
        return max(1, int(self.limit))

    def answered(self, outcome: str, sent_at: float, latency_s: float, now: float,
                 rand: Callable[[], float]) -> None:
        """One answer (an eviction book outcome) to a request sent at ``sent_at`` that took
        ``latency_s`` (``now``, ``sent_at``: the monotonic clock). Decreases at most once per
        round trip: an answer to a request sent before the last cut was sent under the old limit."""
        slow = outcome == "unreachable" or self._slow(latency_s)
        if outcome not in ("unreachable", "throttled"):   # APF rejects before executing: no measure
            self._fast.append(latency_s)
        if outcome == "throttled" or slow:
            if sent_at > self.cut_at:
                self.limit = max(1.0, self.limit * (AIMD_THROTTLED if outcome == "throttled" else AIMD_SLOW))
                self.cut_at = now
                self.cuts += 1
            return
        step = 1.0 + AIMD_JITTER * (min(1.0, max(0.0, rand())) - 0.5)
        self.limit = min(float(self.ceiling), self.limit + step / self.limit)

    def _slow(self, latency_s: float) -> bool:
        if latency_s < SLOW_FLOOR_S or not self._fast:
            return False
        return latency_s > SLOW_FACTOR * min(self._fast)
