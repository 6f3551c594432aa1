"""What a notice the node's one drain serves takes from the notice that governs it (pure).

A node has one drain however many notices are active (executor.governing): the governing notice's
record is what the scheduler writes to; every other running notice it serves is brought up to it
on every turn, so each keeps its own record -- and gets its own verdict, naming what held it up --
and a notice that takes the drain over starts where the drain was (nothing done twice, its record
never emptier than the node).
"""
from __future__ import annotations

import copy
from typing import Any

from common.events import EventType
from common.wire import DrainRecord, DrainState, Step
from executor.drain_start import cordoned_state, want_of
from executor.governing import Want

# What the governing drain did that every notice it serves has seen done; the steps announced again
# for each of them (a served notice's own record then reads like a drain of its own).
SHARED_STEPS = (Step.LB_EXCLUDED, Step.CORDONED, Step.SIGNALLED, Step.EVICTED, Step.DELETED, Step.REQUEUED,
                 Step.FALLBACK, Step.RECONCILED, Step.NODE_EMPTY)
SHARED_EVENTS: dict[str, EventType] = {Step.CORDONED: "drain.cordoned", Step.NODE_EMPTY: "drain.node_empty",
                  Step.FALLBACK: "drain.fallback"}
# The governing drain's end, shared by every notice it serves (ENDED is its own deadline's, not theirs).
SHARED_ENDS = (DrainState.DONE, DrainState.CORDONED_ONLY, DrainState.DRY_RUN)


def catch_up(rec: DrainRecord, gov_id: str, gov: DrainRecord, now: float,
             ) -> tuple[bool, list[tuple[EventType, dict[str, Any]]]]:
    """``rec`` up to the governing ``gov``, in place: its steps, what is left, its phase, its memory,
    a configuration error; and, once cordoned, the state of a notice that wants only the cordon.
    Returns whether ``rec`` changed and the events to say for it (a step it now shares)."""
    changed, said = False, []
    for step in SHARED_STEPS:
        if step in gov.steps and step not in rec.steps:
            rec.steps[step] = max(gov.steps[step], rec.received_at)
            changed = True
            if step in SHARED_EVENTS:
                said.append((SHARED_EVENTS[step], {"drain_of": gov_id, "kind": gov.kind}))
    if gov.remaining is not None and rec.remaining != gov.remaining:
        rec.remaining, changed = list(gov.remaining), True
    if gov.phase and rec.phase != gov.phase:
        rec.phase, changed = gov.phase, True
    if gov.memo and rec.memo != gov.memo:
        rec.memo, changed = copy.deepcopy(gov.memo), True
    if gov.problem and rec.problem != gov.problem:
        rec.problem, changed = gov.problem, True
        rec.steps.setdefault(Step.CONFIG_ERROR, now)
    if want_of(rec) == Want.CORDON and Step.CORDONED in rec.steps:
        rec.state, changed = cordoned_state(rec), True   # all it wants (for now, if deferred)
    return changed, said
