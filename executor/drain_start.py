"""When a notice's drain starts, and what the notice wants of the node meanwhile (pure).

DESIGN.md section 9, "When the drain starts": the contract's ``start`` for the notice's kind,
frozen in the drain record (``DrainRecord.drain_start``).

``at_once``: the drain runs from receipt. ``deadline_minus_budget``:
until ``DrainRecord.begins_at`` (the notice's deadline less the budget, a wall-clock time compared
with the wall clock) the notice wants the node cordoned only -- the scheduler is handed a
cordon-only order, and once the cordon is done the record waits (``waiting``, not running, still
marking the node) -- and its clients are not told, so its workloads run until then. When the time
comes the record gets the step ``deferred_started`` (saved, announced as ``drain.deferred_started``)
and runs: its order moves work, its phases run from its start (``DrainRecord.ends``). The step is
what a restarted executor reads, so a drain neither starts early nor is forgotten. A cordon-only
kind (the contract's ``kinds``) wants the cordon and nothing more, ever.

executor.drain calls these on every turn; executor.governing decides with what ``want_of`` says.
"""
from __future__ import annotations

from typing import Any

from common.notice import Notice
from common.timefmt import format_rfc3339
from common.wire import DrainRecord, DrainState, Step
from executor.governing import Want


def want_of(rec: DrainRecord) -> Want:
    """What the notice of ``rec`` wants of the node now (executor.governing). A finished drain still
    wants its cordon: the node stays closed until the notice is withdrawn or the machine goes. A
    deferred drain wants the cordon only until its start came (``DrainRecord.begun``)."""
    if rec.policy == "ignore" or rec.state in (DrainState.WITHDRAWN, DrainState.DRY_RUN, DrainState.IGNORED):
        return Want.NOTHING
    return Want.DRAIN if rec.policy == "drain" and rec.begun() else Want.CORDON


def cordoned_state(rec: DrainRecord) -> str:
    """What a record that wants only the cordon is, once the node is cordoned: a cordon-only kind
    has all it wants (``cordoned_only``, an end); a deferred drain waits for its start."""
    return DrainState.CORDONED_ONLY if rec.policy != "drain" else DrainState.WAITING


def due(rec: DrainRecord, deadline: float, now: float) -> bool:
    """Has a deferred drain's start (``DrainRecord.begins_at``, on the wall clock) come, and has the
    drain yet to be started? Never for a drain that ended, was withdrawn, or was never to move work."""
    return (not rec.begun() and rec.policy == "drain" and rec.state in (DrainState.RUNNING, DrainState.WAITING)
            and now >= rec.begins_at(deadline))


def deferred_started(n: Notice, rec: DrainRecord, now: float) -> dict[str, Any]:
    """What ``drain.deferred_started`` says: when it was to start, how late the loop was, whether the
    node was cordoned meanwhile and whether the notice waited at all (it did not if it came with
    less than ``budget_s`` left)."""
    starts_at = rec.begins_at(n.deadline)
    return {"kind": n.kind, "starts_at": format_rfc3339(starts_at), "late_ms": round((now - starts_at) * 1000),
            "deadline": format_rfc3339(n.deadline), "cordoned": Step.CORDONED in rec.steps,
            "waited": rec.state == DrainState.WAITING}


def cordon_only(rec: DrainRecord, dry_run: bool) -> bool:
    """Does the order ask for the cordon only? A dry run plans the whole drain at once (it does
    nothing, so there is nothing to wait for; its plan's phases run from the drain's start)."""
    if dry_run:
        return rec.policy != "drain"
    return want_of(rec) != Want.DRAIN
