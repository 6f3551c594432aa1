"""The verifier's pure core for one notice: is it done, overrun, or still open -- and how urgent?

``start_clock`` freezes a notice's phase ends (``common.wire.phase_ends``, the
formula the executor drains by) from the budget of its drain record -- the one
the drain started with -- or, until the executor's first record arrives, from the
contract the verifier has; ``judge`` looks at that clock, the executor's latest
record and the time, and returns at most one verdict; ``escalation`` says which
cutoff has passed. The verifier persists clocks and verdicts, so a notice is
judged exactly once even across restarts. No I/O here: the clock is passed in.

What the drain record carries is ``common.wire.DrainRecord``: ``steps`` (the
step names of ``common.wire.Step``), ``remaining`` (None until first read),
``phase`` (the step in progress, optional), ``state``, ``acks``, ``budget``.

The executor's word alone is never "done": ``judge`` also takes the verifier's own read of the
scheduler (``Observation``, verifier/scheduler_read.py), made after the executor said so. When
they agree, done; when the read says otherwise, or cannot be made, by the cutoff (and at least
``VERIFY_WAIT_S`` after the verifier heard the report, on the monotonic clock), the verdict is
"unverified", with the reason. A dry run and an ignored kind get verdicts of
their own kind: nothing was done, so there is nothing to call done.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common import pod_policy
from common.notice import Notice
from common.verdict import CORDONED, DONE, DRY_RUN, IGNORED, OVERRUN, UNVERIFIED, VOLUMES_ATTACHED, Verdict
from common.wire import (
    CHECKPOINT_OVER,
    EVICT_OVER,
    FINAL,
    HELD_UP_BY,
    BadRecord,
    Budget,
    DrainRecord,
    DrainState,
    Escalation,
    Phase,
    Step,
    phase_ends,
)

# After the cutoff, wait this long for a progress report sent after it before
# judging on older news: the executor publishes on every step and every second,
# so a node that emptied just before the cutoff is not called overrun.
PROGRESS_GRACE_S = 2.5
# How long after the executor says "empty" the verifier's own read may take to agree (it reads
# about once a second) before the verdict is "unverified" -- at least; the cutoff, if later. An
# interval: counted on the monotonic clock from when the verifier heard it (``waited_s``), so a
# wall clock stepped ahead does not call a drain unverified before its read had the time.
VERIFY_WAIT_S = 5.0

_EVICT_STEPS = (Step.EVICTED, Step.DELETED)
_REQUEUE_STEPS = (Step.REQUEUED, Step.SIGNALLED)
_TIMES = ("issued_at", "received_at", "deadline", "margin_s", "checkpoint_at", "evict_at", "cutoff")


@dataclass(frozen=True, slots=True)
class Clock:
    """A notice's phase ends, frozen: a later contract does not move them, only the drain record's
    own budget does (the one the drain started with)."""

    notice_id: str
    issued_at: float
    received_at: float
    deadline: float
    margin_s: float
    checkpoint_at: float   # end of the checkpoint wait
    evict_at: float        # end of eviction by the book; then delete / kill
    cutoff: float          # deadline - margin: the node must be empty by then
    budget: Budget | None = None   # what it was computed from (None: a clock saved before it was kept)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"notice_id": self.notice_id, **{k: getattr(self, k) for k in _TIMES}}
        d["budget"] = self.budget.to_dict() if self.budget is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Clock:
        """KeyError, TypeError or ValueError if ``d`` is not a clock."""
        if not isinstance(d, dict):
            raise TypeError(f"a clock is an object, not {type(d).__name__}")
        try:
            budget: Budget | None = Budget.from_dict(d.get("budget")) if d.get("budget") is not None else None
        except BadRecord:
            budget = None   # recomputed from the drain record when it is heard
        issued, received, deadline, margin, checkpoint, evict, cutoff = (float(d[k]) for k in _TIMES)
        return cls(str(d["notice_id"]), issued, received, deadline, margin, checkpoint, evict, cutoff, budget)

    def moved_by(self, rec: DrainRecord) -> bool:
        """Does the drain record say the drain runs on another budget (or receipt) than this clock?"""
        return (self.budget != rec.budget or self.received_at != rec.received_at
                or self.checkpoint_at != rec.ends(self.deadline).checkpoint_by)   # a deferred drain's start


@dataclass(frozen=True, slots=True)
class Observation:
    """The verifier's own read of the scheduler (plain data): when it was made, whether the node
    is cordoned (Kubernetes) / drained (Slurm), and what still counts on it (None: unreadable)."""

    at: float
    cordoned: bool
    left: tuple[str, ...] | None
    error: str = ""
    skipped: tuple[str, ...] = ()   # of ``left``: pods whose own policy is skip (common.pod_policy)
    # Kubernetes: the attached volumes no staying pod accounts for (verifier/volumes.py); None
    # where there are none to read (Slurm). ``volumes_seen_at``: the last read that found any.
    volumes: tuple[str, ...] | None = None
    volumes_seen_at: float = 0.0


def start_clock(notice: Notice, budget: Budget, received_at: float | None = None,
                begins_at: float | None = None) -> Clock:
    """The phases run in the budget's order from receipt: checkpoint, then evict, then the margin.

    ``received_at``: the drain record's (the executor's); else the notice's arrival. ``begins_at``:
    when the phases begin, if not at receipt (a deferred drain's start, ``DrainRecord.begins_at``).
    A notice
    that arrived after its own cutoff (late delivery, skewed clock) is still drained; it is
    judged by what happens, never dropped.
    """
    received = received_at if received_at is not None else (notice.received_at or notice.issued_at)
    ends = phase_ends(received if begins_at is None else begins_at, notice.deadline, budget)
    return Clock(notice.id, notice.issued_at, received, notice.deadline, budget.margin_s,
                 ends.checkpoint_by, ends.evict_at, ends.cutoff, budget)


def clock_for(notice: Notice, rec: DrainRecord | None, budget: Budget) -> Clock:
    """The clock of ``notice``: its drain record's budget when there is one, else ``budget``."""
    if rec is not None:
        return start_clock(notice, rec.budget, rec.received_at, rec.begins_at(notice.deadline))
    return start_clock(notice, budget)


def escalation(clock: Clock, now: float) -> Escalation | None:
    """The highest cutoff passed, and since when: level-triggered, so it needs no memory."""
    for level, at in ((FINAL, clock.cutoff), (EVICT_OVER, clock.evict_at), (CHECKPOINT_OVER, clock.checkpoint_at)):
        if now >= at:
            return Escalation(level, at)
    return None


def finished_at(rec: DrainRecord, progress_at: float) -> float | None:
    """When the node was seen empty (or, for a cordon-only policy, cordoned); None if not yet."""
    steps = rec.steps
    if rec.state == DrainState.WAITING:
        return None   # a deferred drain, cordoned, its start not come: nothing is finished
    if rec.state == DrainState.CORDONED_ONLY and Step.CORDONED in steps:
        return float(steps[Step.CORDONED])
    if Step.NODE_EMPTY in steps:
        return float(steps[Step.NODE_EMPTY])
    # The executor read the scheduler and found nothing left: empty as of that report.
    if Step.CORDONED in steps and rec.remaining == []:
        return progress_at
    return None


def held_up_by(clock: Clock, rec: DrainRecord | None, move_step: str) -> str:
    """The step that was in progress at the cutoff (steps after it are not counted)."""
    if clock.received_at > clock.cutoff:
        return "notice"
    steps = {k: v for k, v in rec.steps.items() if v <= clock.cutoff} if rec is not None else {}
    phase = rec.phase if rec is not None else ""
    if Step.CORDONED not in steps:
        return Phase.CORDON
    if phase in HELD_UP_BY and phase != "notice":
        return phase
    if Step.FALLBACK in steps:
        return Phase.FALLBACK
    if any(s in steps for s in _EVICT_STEPS):
        return Phase.EVICT
    if any(s in steps for s in _REQUEUE_STEPS):
        return Phase.REQUEUE
    if Step.CLIENTS_TOLD in steps:
        return Phase.CHECKPOINT
    return move_step


def confirmed(rec: DrainRecord, seen: Observation | None, done_at: float, waiting: bool) -> str | None:
    """Does the verifier's own read agree with the executor's "empty" (or "cordoned")? "" when it
    does; the reason when it does not, or cannot, once no longer ``waiting``; None: wait for a
    newer read."""
    if seen is None or seen.at < done_at:
        if waiting:
            return None
        return "no read of the scheduler by the verifier since the executor reported" + (
            "" if seen is None else f" (last read: {seen.error or 'before the report'})")
    if seen.left is None:
        return None if waiting else f"the verifier cannot read the scheduler: {seen.error}"
    cordon_only = rec.state == DrainState.CORDONED_ONLY
    left = seen.left
    if pod_policy.skip_honoured(rec.kind):   # the executor left them, uncounted: so does the verifier
        left = tuple(k for k in left if k not in seen.skipped)
    if (seen.cordoned if cordon_only else left == ()):
        return ""
    if waiting:
        return None
    what = "not cordoned" if cordon_only else f"{len(left)} still on it: {', '.join(left[:5])}"
    return f"the executor reported the node {'cordoned' if cordon_only else 'empty'}; the verifier's own read: {what}"


def volumes_wait_until(clock: Clock, done_at: float) -> float:
    """How long "done" waits for the node's volumes to detach: the margin after the node was empty,
    never past the deadline (the machine may go then)."""
    return min(done_at + clock.margin_s, clock.deadline)


def volumes_verdict(clock: Clock, seen: Observation | None, done_at: float, now: float) -> Verdict | None:
    """The node is empty and the verifier's read agrees: done once no volume the evicted pods used
    is attached (with how long the detach took, when one was waited for); None while waiting
    within the margin; "volumes_attached", naming them, when the margin ran out first."""
    pending = seen.volumes if seen is not None else None
    if not pending:
        waited = seen is not None and seen.volumes is not None and seen.volumes_seen_at >= done_at
        detach_ms = round((seen.at - done_at) * 1000) if waited and seen is not None else None
        return Verdict(DONE, clock.notice_id, now, finished_at=done_at, detach_ms=detach_ms)
    until = volumes_wait_until(clock, done_at)
    if now < until:
        return None
    return Verdict(VOLUMES_ATTACHED, clock.notice_id, now, finished_at=done_at, volumes=pending,
                   reason=f"{len(pending)} volume(s) still attached to the node {round(now - done_at, 1)} s after "
                          f"it was empty (margin {clock.margin_s:g} s): {', '.join(pending[:3])}")


def _reason(rec: DrainRecord | None) -> str:
    """Why an overrun happened, in words, where the drain record knows."""
    if rec is None:
        return ""
    if rec.problem:
        return f"configuration error: {rec.problem}"
    if rec.remaining and any(x.endswith(":unreachable") for x in rec.remaining) and Step.FALLBACK not in rec.steps:
        why = ("the contract allows no fallback for a " + rec.kind + " notice" if not rec.fallback_allowed
               else "its moment had not come, or kubernetes.fallback_command is empty")
        return f"the scheduler did not answer, and no fallback ran: {why}"
    return ""


def judge(clock: Clock, rec: DrainRecord | None, progress_at: float, now: float,  # noqa: PLR0913 -- the verdict's inputs by name
          move_step: str = "evict", seen: Observation | None = None, *, waited_s: float = 0.0) -> Verdict | None:
    """At most one verdict for an open notice. ``progress_at``: when its drain record arrived;
    ``seen``: the verifier's own latest read of the scheduler; ``waited_s``: how long (monotonic)
    the verifier has known the drain finished (``VERIFY_WAIT_S``).

    ``move_step`` names how this scheduler moves work off ("evict" on
    Kubernetes, "requeue" on Slurm), blamed when no step says otherwise.
    """
    if rec is not None and rec.state in (DrainState.DRY_RUN, DrainState.IGNORED):
        outcome = DRY_RUN if rec.state == DrainState.DRY_RUN else IGNORED
        return Verdict(outcome, clock.notice_id, now, reason=f"{rec.state}: nothing was done to the node")
    done_at = finished_at(rec, progress_at) if rec is not None else None
    if done_at is not None and rec is not None:
        if done_at > clock.cutoff:
            return Verdict(OVERRUN, clock.notice_id, now, held_up_by=held_up_by(clock, rec, move_step),
                           finished_at=done_at)
        # A read that fails or disagrees for a moment (a slow server, a pod just going) is given
        # until the cutoff, and at least VERIFY_WAIT_S, to agree: done means empty by the cutoff.
        agreed = confirmed(rec, seen, done_at, now < clock.cutoff or waited_s < VERIFY_WAIT_S)
        if agreed is None:
            return None
        if agreed:
            left = seen.left if seen is not None and seen.left else ()
            return Verdict(UNVERIFIED, clock.notice_id, now, left=left, finished_at=done_at, reason=agreed)
        if rec.state == DrainState.CORDONED_ONLY:
            # Not "done": nothing was moved, and saying the node is empty would be a lie (nor is
            # there a volume of an evicted pod to see go).
            return Verdict(CORDONED, clock.notice_id, now, finished_at=done_at, reason=(
                f"cordon only: the contract's policy for a {rec.kind} notice keeps new work off the node "
                "and moves none; what runs on it stays"))
        return volumes_verdict(clock, seen, done_at, now)
    if now < clock.cutoff:
        return None
    if progress_at < clock.cutoff and now < clock.cutoff + PROGRESS_GRACE_S:
        return None
    left = tuple(rec.remaining or ()) if rec is not None else ()
    return Verdict(OVERRUN, clock.notice_id, now, held_up_by=held_up_by(clock, rec, move_step), left=left,
                   reason=_reason(rec))
