"""A pod's eviction as a state machine (pure: no I/O, clock passed in): the phases, the answers
that move a pod between them, and ``transition`` -- the retry each answer leads to. The book
(``executor.kube.eviction_book``) keeps one ``PodState`` per pod and decides what to send.

A pod's phases, and the answer that moves it (``_NEXT``)::

    pending --send--> in_flight --accepted--> accepted --(gone from listing)--> gone
                          |  \\--gone (404, or 409: the UID precondition says it is another pod)--> gone
                          |   \\--refused (not our node: never retried)--> refused
                          |    \\--unsupported (no Eviction version to send: never a DELETE)--> refused
                          \\--blocked (PDB 429) / throttled (APF 429) / error / unreachable--> retry
                                                                          --(backoff due)--> in_flight

The two 429s get their own retry (``executor.kube.pacing``): a PDB refusal is retried
soon and counts towards escalation at the cutoff; a throttled answer holds every send of
the book until the server's Retry-After (with jitter) and never escalates the pod.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from common.clock import MonoTime
from executor.kube import pacing

PENDING, IN_FLIGHT, RETRY, ACCEPTED, GONE, REFUSED = "pending", "in_flight", "retry", "accepted", "gone", "refused"
DONE = frozenset({ACCEPTED, GONE, REFUSED})
OUTCOMES = ("accepted", "gone", "blocked", "throttled", "error", "unreachable", "refused", "unsupported")
_NEXT = {"accepted": ACCEPTED, "gone": GONE, "blocked": RETRY, "throttled": RETRY, "error": RETRY,
         "unreachable": RETRY, "refused": REFUSED, "unsupported": REFUSED}
# Past the cutoff, a pod whose last answer was one of these is reported (drain.eviction_blocked).
# An unreachable or throttling server is not the pod's budget: just retry.
REPORT_AFTER = ("blocked", "error")
# ... and only a PodDisruptionBudget's refusal -- "blocked": a 429 whose Status carries the
# DisruptionBudget cause (eviction.go checkAndDecrement; ``pacing.classify_429``) -- turns into a
# DELETE under ``pdb_blocked = delete``. A webhook's denial (403/400 "admission webhook ... denied
# the request"), a server error (500) or a plain APF 429 never does: the policy bypasses budgets,
# not whoever else said no.
DELETE_AFTER = ("blocked",)

@dataclass(frozen=True, slots=True)
class PodState:
    phase: str = PENDING
    op: str = ""                  # the call in flight or last sent: evict | delete
    grace_s: int | None = None    # gracePeriodSeconds of that call (None: the pod's own)
    attempts: int = 0             # answers that did not move the pod (throttling not counted)
    throttles: int = 0            # throttled answers in a row
    last: str = ""                # the last answer's outcome
    retry_at: float = 0.0                  # MonoTime
    blocked_since: float | None = None     # MonoTime
    pdb: str = ""                 # the PDB the server named in its last 429
    error: str = ""
    reported: bool = False        # drain.eviction_blocked emitted


@dataclass(frozen=True, slots=True)
class Answer:
    outcome: str        # one of OUTCOMES
    detail: str = ""
    pdb: str = ""
    retry_after: float | None = None   # the 429's Retry-After, seconds
    sent_at: float = 0.0               # monotonic: when the call went out (pacing.ConcurrencyLimit)
    latency_s: float = 0.0             # how long its answer took

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")


def transition(st: PodState, answer: Answer, now: MonoTime, draw: float = 0.0) -> PodState:
    """The state after an answer to the call in flight (``now``: the monotonic clock, which every
    retry is timed on); ``draw`` in [0, 1): the retry's jitter."""
    def rand() -> float:
        return draw

    phase = _NEXT[answer.outcome]
    if answer.outcome == "throttled":
        throttles = st.throttles + 1
        return dataclasses.replace(
            st, phase=RETRY, throttles=throttles, last=st.last or "throttled",
            retry_at=now + pacing.throttled_delay(throttles, answer.retry_after, rand))
    attempts = st.attempts + (1 if phase == RETRY else 0)
    blocked_since = st.blocked_since
    if answer.outcome == "blocked" and blocked_since is None:
        blocked_since = now
    retry_at = now + pacing.refused_delay(attempts, answer.retry_after, rand) if phase == RETRY else 0.0
    return dataclasses.replace(
        st, phase=phase, attempts=attempts, throttles=0, last=answer.outcome,
        retry_at=retry_at, blocked_since=blocked_since,
        pdb=answer.pdb or st.pdb, error=answer.detail[:300] if phase in (RETRY, REFUSED) else st.error)
