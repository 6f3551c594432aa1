"""The verifier's pure core: for one notice, is it done, overrun, or still open -- and how urgent?

``start_clock`` freezes a notice's budget when the verifier first sees it
(deadline less the contract's margin, and the checkpoint and evict phase
ends); ``judge`` looks at that clock, the executor's latest progress and the
time, and returns at most one verdict; ``escalation`` says which cutoff has
passed. The verifier persists clocks and verdicts, so a notice is judged
exactly once even across restarts. No I/O here: the clock is passed in.

What the executor's progress record may carry (docs/internals.md):
``steps`` {step: epoch} with ``cordoned``, ``clients_told``, ``evicted`` /
``deleted`` (last eviction), ``requeued`` / ``signalled`` (last requeue),
``fallback``, ``node_empty``; ``remaining`` [what still counts on the node]
(None until first read); ``phase`` (cordon|checkpoint|evict|requeue|fallback,
the step in progress, optional); ``state``; ``acks``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from common.notice import Notice

DEFAULT_MARGIN_S = 5.0
DEFAULT_CHECKPOINT_S = 15.0
DEFAULT_EVICT_S = 60.0
# After the cutoff, wait this long for a progress report sent after it before
# judging on older news: the executor publishes on every step and every second,
# so a node that emptied just before the cutoff is not called overrun.
PROGRESS_GRACE_S = 2.5

# The steps a drain can be held up by (a bounded metric label set).
HELD_UP_BY = ("notice", "cordon", "checkpoint", "evict", "requeue", "fallback")
ESCALATION_LEVELS = ("checkpoint_over", "evict_over", "final")

_EVICT_STEPS = ("evicted", "deleted")
_REQUEUE_STEPS = ("requeued", "signalled")


@dataclass(frozen=True, slots=True)
class Clock:
    """A notice's budget, frozen when the verifier first saw it (a later contract does not move it)."""

    notice_id: str
    issued_at: float
    received_at: float
    deadline: float
    margin_s: float
    checkpoint_at: float   # end of the checkpoint wait
    evict_at: float        # end of eviction by the book; then delete / kill
    cutoff: float          # deadline - margin: the node must be empty by then

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Clock:
        return cls(**{k: (str(d[k]) if k == "notice_id" else float(d[k])) for k in cls.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: str                 # "done" | "overrun"
    notice_id: str
    at: float                    # when the verdict was reached (our clock)
    held_up_by: str = ""         # for overrun: the step in progress at the cutoff (HELD_UP_BY)
    left: tuple[str, ...] = ()   # for overrun: what was still on the node
    finished_at: float = 0.0     # when the node was empty (0: not seen)

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "notice_id": self.notice_id, "at": self.at,
                "held_up_by": self.held_up_by, "left": list(self.left),
                "finished_at": self.finished_at}


def drain_budget(drain: dict[str, Any] | None) -> tuple[float, float, float]:
    """(margin_s, checkpoint_s, evict_s) from a contract's ``drain`` section; bad values fall back."""
    drain = drain if isinstance(drain, dict) else {}
    out = []
    for key, default in (("margin_s", DEFAULT_MARGIN_S), ("checkpoint_s", DEFAULT_CHECKPOINT_S),
                         ("evict_s", DEFAULT_EVICT_S)):
        try:
            value = float(drain.get(key, default))
        except (TypeError, ValueError):
            value = default
        out.append(value if value >= 0 else default)
    return out[0], out[1], out[2]


def start_clock(notice: Notice, drain: dict[str, Any] | None) -> Clock:
    """The phases run in the contract's order from receipt: checkpoint, then evict, then the margin.

    Every phase end is clamped to the cutoff, so a short notice (GCP's 30 s)
    squeezes the later phases instead of running past the deadline.
    """
    margin_s, checkpoint_s, evict_s = drain_budget(drain)
    cut = cutoff(notice, margin_s)
    received = notice.received_at or notice.issued_at
    checkpoint_at = min(received + checkpoint_s, cut)
    evict_at = min(received + checkpoint_s + evict_s, cut)
    return Clock(notice.id, notice.issued_at, received, notice.deadline, margin_s,
                 checkpoint_at, max(evict_at, checkpoint_at), cut)


def cutoff(notice: Notice, margin_s: float) -> float:
    """The moment the node must be empty by: the deadline less the contract's margin.

    A notice that arrived after its own cutoff (late delivery, skewed clock)
    is still drained; it is judged by what happens, never dropped.
    """
    return notice.deadline - margin_s


def escalation(clock: Clock, now: float) -> tuple[str, float] | None:
    """The highest cutoff passed, and since when: level-triggered, so it needs no memory."""
    for level, at in (("final", clock.cutoff), ("evict_over", clock.evict_at),
                      ("checkpoint_over", clock.checkpoint_at)):
        if now >= at:
            return level, at
    return None


def finished_at(progress: dict[str, Any], progress_at: float) -> float | None:
    """When the node was seen empty (or, for a cordon-only policy, cordoned); None if not yet."""
    steps = progress.get("steps") or {}
    if progress.get("state") == "cordoned_only" and "cordoned" in steps:
        return float(steps["cordoned"])
    if "node_empty" in steps:
        return float(steps["node_empty"])
    # The executor read the scheduler and found nothing left: empty as of that report.
    if "cordoned" in steps and progress.get("remaining") == []:
        return progress_at
    return None


def held_up_by(clock: Clock, progress: dict[str, Any], move_step: str) -> str:
    """The step that was in progress at the cutoff (steps after it are not counted)."""
    if clock.received_at > clock.cutoff:
        return "notice"
    steps = {k: v for k, v in (progress.get("steps") or {}).items()
             if isinstance(v, (int, float)) and v <= clock.cutoff}
    phase = progress.get("phase")
    if "cordoned" not in steps:
        return "cordon"
    if phase in HELD_UP_BY and phase != "notice":
        return str(phase)
    if "fallback" in steps:
        return "fallback"
    if any(s in steps for s in _EVICT_STEPS):
        return "evict"
    if any(s in steps for s in _REQUEUE_STEPS):
        return "requeue"
    if "clients_told" in steps:
        return "checkpoint"
    return move_step


def judge(clock: Clock, progress: dict[str, Any] | None, progress_at: float, now: float,
          move_step: str = "evict") -> Verdict | None:
    """At most one verdict for an open notice. ``progress_at``: when its progress report arrived.

    ``move_step`` names how this scheduler moves work off ("evict" on
    Kubernetes, "requeue" on Slurm), blamed when no step says otherwise.
    """
    progress = progress or {}
    done_at = finished_at(progress, progress_at)
    if done_at is not None:
        if done_at <= clock.cutoff:
            return Verdict("done", clock.notice_id, now, finished_at=done_at)
        return Verdict("overrun", clock.notice_id, now, held_up_by=held_up_by(clock, progress, move_step),
                       finished_at=done_at)
    if now < clock.cutoff:
        return None
    if progress_at < clock.cutoff and now < clock.cutoff + PROGRESS_GRACE_S:
        return None
    left = tuple(str(x) for x in (progress.get("remaining") or ()))
    return Verdict("overrun", clock.notice_id, now, held_up_by=held_up_by(clock, progress, move_step),
                   left=left)
