"""The verifier's decisions over plain data: clocks, escalations, verdicts and the counters they feed.

``advance(state, view, now)`` is the whole policy: given the persisted state
(a JSON-safe dict), what the verifier currently knows of the world (``View``)
and the time, it updates the state and returns what to announce. The shell
(verifier/__main__.py) persists the state *before* announcing anything, so a
verifier killed at any instant neither forgets a verdict nor gives a second.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from common.events import EventType, is_event_type
from common.notice import Notice
from common.timefmt import MAX_EPOCH, MIN_EPOCH, format_rfc3339
from common.verdict import (
    CORDONED,
    DONE,
    DRY_RUN,
    IGNORED,
    OVERRUN,
    UNVERIFIED,
    VOLUMES_ATTACHED,
    VerdictRecord,
    decode_verdicts,
)
from common.wire import (
    BUILTIN_BUDGET,
    LEVELS,
    Budget,
    DrainRecord,
    Escalation,
)
from verifier import metrics
from verifier.judge import Clock, Observation, clock_for, escalation, judge
from verifier.timeline import pod_lines, timeline

STATE_VERSION = 1
# A verdict is remembered this long after its notice is gone; the watcher
# forgets withdrawn ids after a day, and active notices are never forgotten
# while active, so no notice can come back unjudged-looking and be judged twice.
VERDICT_MEMORY_S = 7 * 86400.0
MAX_LEFT = 100            # what was left, listed in a verdict event (the count is always exact)
PUBLISHED_RECENT = 8      # verdicts of gone notices still re-announced on verifier.pub
# Verdicts after which nothing escalates: the drain is over and nothing is owed (volumes_attached:
# the node is empty; what is left is the attach/detach controller's, not the drain's).
SETTLED = (DONE, DRY_RUN, IGNORED, VOLUMES_ATTACHED, CORDONED)
# The event each verdict is announced as (drain.dry_run and drain.ignored are the executor's own).
VERDICT_EVENTS: dict[str, EventType] = {DONE: "drain.done", OVERRUN: "drain.overrun", UNVERIFIED: "drain.unverified",
                  DRY_RUN: "drain.dry_run_judged", IGNORED: "drain.ignored_judged",
                  VOLUMES_ATTACHED: "drain.volumes_attached", CORDONED: "drain.cordoned_judged"}

@dataclass(frozen=True, slots=True)
class View:
    """What the verifier knows of the world right now (from the watcher and the executor)."""

    active: dict[str, Notice]
    withdrawn: frozenset[str] = frozenset()
    progress: dict[str, DrainRecord] = field(default_factory=dict)   # the executor's drain records
    progress_at: float = 0.0                 # when the last progress report arrived (our clock)
    budget: Budget = BUILTIN_BUDGET          # the contract's, for a notice whose drain record is not in yet
    move_step: str = "evict"                 # "requeue" on Slurm
    arrivals: dict[str, dict[str, float]] = field(default_factory=dict)  # id -> channel -> epoch
    seen: Observation | None = None          # the verifier's own latest read of the scheduler
    mono: float = 0.0                        # now on the monotonic clock (MonoTime)
    done_heard: dict[str, float] = field(default_factory=dict)   # id -> when (mono) heard finished


# What the verifier says in its log only: a clock moved or stopped is no event of the spool's.
LogOnly = Literal["verifier.clock_rebased", "verifier.clock_stopped"]


@dataclass(frozen=True, slots=True)
class Emit:
    """Something to announce: always a log line, and an event to the spool when its type is one."""

    type: EventType | LogOnly
    notice_id: str
    data: dict[str, Any]

    @property
    def spool(self) -> bool:
        return is_event_type(self.type)


def as_number(x: Any) -> float:
    """A finite JSON number as float; anything else (bool, string, null, inf) is 0."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return 0.0


def as_epoch(x: Any) -> float:
    """A plausible epoch time (before the year 5000), else 0: absurd times must not overflow a timeline."""
    t = as_number(x)
    return t if 0 < t < 1e11 else 0.0


def new_state() -> dict[str, Any]:
    # generation: bumped by every save, so the newer of two copies of the state wins (verifier/__main__.py).
    return {"version": STATE_VERSION, "generation": 0, "clocks": {}, "verdicts": {}, "escalated": {},
            "metrics": metrics.empty(), "rejections_seen": {}, "unacked": {}}


def normalize(doc: Any) -> dict[str, Any]:
    """``load(doc)``'s state alone."""
    return load(doc)[0]


def load(doc: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """A loaded state file with every key present, and what was wrong in it by verdict; anything
    unusable is dropped, entry by entry. Verdicts are ``VerdictRecord``s (common.verdict's codec).

    Deep, not just top-level: whatever is kept here is used without further checks, and a
    verifier that crashed on its own state file would restart into the same crash.
    """
    state = new_state()
    problems: dict[str, str] = {}
    if isinstance(doc, dict):
        for key, default in state.items():
            value = doc.get(key, default)
            state[key] = value if isinstance(value, type(default)) else default
        state["metrics"] = metrics.clean(state["metrics"])
        state["clocks"] = {nid: c for nid, c in state["clocks"].items() if _valid_clock(c)}
        for key in ("escalated", "unacked"):
            state[key] = {k: v for k, v in state[key].items() if isinstance(v, dict)}
        state["verdicts"], problems = decode_verdicts(state["verdicts"])
        state["escalated"] = {nid: {lvl: as_epoch(t) for lvl, t in seen.items()
                                    if lvl in LEVELS and as_epoch(t)}
                              for nid, seen in state["escalated"].items()}
    return state, problems


def to_json(state: dict[str, Any]) -> dict[str, Any]:
    """The state as verdicts.json holds it (the one place verdicts are written)."""
    return {**state, "verdicts": {nid: v.to_dict() for nid, v in state["verdicts"].items()}}


def settled(state: dict[str, Any], nid: str) -> bool:
    """Has ``nid`` a verdict after which nothing is owed (done, dry run, ignored)?"""
    v: VerdictRecord | None = state["verdicts"].get(nid)
    return v is not None and v.outcome in SETTLED


def _valid_clock(c: Any) -> bool:
    """A clock whose every time can be written as RFC 3339 (its verdict event does)."""
    try:
        clock = Clock.from_dict(c)
    except (KeyError, TypeError, ValueError):
        return False
    times = (clock.issued_at, clock.received_at, clock.deadline, clock.checkpoint_at, clock.evict_at,
             clock.cutoff)
    return all(MIN_EPOCH <= t < MAX_EPOCH for t in times) and math.isfinite(clock.margin_s)


def open_notices(state: dict[str, Any], active: dict[str, Notice]) -> bool:
    """Is any active notice still unjudged (so the verifier's own read of the scheduler is wanted)?"""
    return any(nid not in state["verdicts"] for nid in active)


def advance(state: dict[str, Any], view: View, now: float) -> tuple[list[Emit], bool]:
    """Start clocks, escalate, judge; returns (what to announce, whether the state changed)."""
    emits: list[Emit] = []
    changed = _forget(state, view, now, emits)
    for n in view.active.values():
        if settled(state, n.id):
            continue
        if n.id not in state["clocks"]:
            if n.id in state["verdicts"]:
                continue   # judged, and its clock already dropped: nothing left to do
            emits.append(_start(state, n, view, now))
            changed = True
        clock = Clock.from_dict(state["clocks"][n.id])
        rec = view.progress.get(n.id)
        if rec is not None and n.id not in state["verdicts"] and clock.moved_by(rec):
            clock = _rebase(state, n, rec, emits)
            changed = True
        if _escalate(state, clock, now, emits):
            changed = True
        if n.id in state["verdicts"]:
            continue
        # An interval, monotonic; a drain not known finished (or not noted: a caller without the
        # shell's bookkeeping) waits for nothing beyond the cutoff.
        heard = view.done_heard.get(n.id)
        waited = math.inf if heard is None else view.mono - heard
        verdict = judge(clock, rec, view.progress_at, now, view.move_step, view.seen, waited_s=waited)
        if verdict is None:
            continue
        tl = timeline(n, rec, view.arrivals.get(n.id), verdict_at=now,
                      escalations=state["escalated"].get(n.id))
        pods, pods_count = pod_lines(rec, verdict.left, now)
        record = VerdictRecord.of(
            verdict, max_left=MAX_LEFT, pods=pods, pods_count=pods_count,
            kind=n.kind, channel=n.channel, timeline_ms=tl,
            issued_at=format_rfc3339(clock.issued_at), cutoff=format_rfc3339(clock.cutoff),
            deadline=format_rfc3339(clock.deadline), margin_s=clock.margin_s,
            late_ms=round((verdict.finished_at - clock.cutoff) * 1000) if verdict.finished_at > clock.cutoff else None)
        state["verdicts"][n.id] = record
        data = record.to_dict()
        metrics.inc(state["metrics"], "sco_agent_verdicts_total",
                    (verdict.outcome, verdict.held_up_by or "none"))
        metrics.observe_timeline(state["metrics"], tl)
        metrics.count_pods(state["metrics"], pods)
        emits.append(Emit(VERDICT_EVENTS[verdict.outcome], n.id, data))
        changed = True
    return emits, changed


def _start(state: dict[str, Any], n: Notice, view: View, now: float) -> Emit:
    clock = clock_for(n, view.progress.get(n.id), view.budget)
    state["clocks"][n.id] = clock.to_dict()
    metrics.inc(state["metrics"], "sco_agent_notices_total", metrics.notice_labels(n.kind, n.channel))
    return Emit("verifier.clock_started", n.id, {
        "kind": n.kind, "channel": n.channel, "deadline": format_rfc3339(clock.deadline),
        "margin_s": clock.margin_s, "cutoff": format_rfc3339(clock.cutoff),
        "checkpoint_by": format_rfc3339(clock.checkpoint_at), "evict_by": format_rfc3339(clock.evict_at),
        "seconds_left": round(clock.cutoff - now, 3)})


def _rebase(state: dict[str, Any], n: Notice, rec: DrainRecord, emits: list[Emit]) -> Clock:
    """The drain record is in, and its drain runs on another budget than the clock was started on
    (the contract changed before the executor started the drain): judge by the drain's own. Levels
    already announced stay announced."""
    clock = clock_for(n, rec, rec.budget)
    state["clocks"][n.id] = clock.to_dict()
    emits.append(Emit("verifier.clock_rebased", n.id, {
        "margin_s": clock.margin_s, "cutoff": format_rfc3339(clock.cutoff),
        "checkpoint_by": format_rfc3339(clock.checkpoint_at), "evict_by": format_rfc3339(clock.evict_at)}))
    return clock


def _escalate(state: dict[str, Any], clock: Clock, now: float, emits: list[Emit]) -> bool:
    """Record a newly passed cutoff once (and every level it skipped); True if one was."""
    level = escalation(clock, now)
    if level is None:
        return False
    name, since = level.level, level.since
    seen = state["escalated"].setdefault(clock.notice_id, {})
    if name in seen:
        return False
    for lower in LEVELS[:LEVELS.index(name)]:
        seen.setdefault(lower, since)
    seen[name] = since
    metrics.inc(state["metrics"], "sco_agent_escalations_total", (name,))
    emits.append(Emit("drain.escalated", clock.notice_id, {
        "escalation": name, "since": format_rfc3339(since), "by": "verifier",
        "seconds_to_cutoff": round(clock.cutoff - now, 3)}))
    return True


def _forget(state: dict[str, Any], view: View, now: float, emits: list[Emit]) -> bool:
    """Drop clocks of withdrawn notices (no verdict is owed) and verdicts long gone."""
    changed = False
    for nid, c in list(state["clocks"].items()):
        if nid in view.active:
            continue
        if nid in view.withdrawn or now > as_number(c.get("deadline")) + VERDICT_MEMORY_S:
            del state["clocks"][nid]
            state["escalated"].pop(nid, None)
            changed = True
            if nid not in state["verdicts"]:
                emits.append(Emit("verifier.clock_stopped", nid, {"reason": "withdrawn"}))
    for nid, v in list(state["verdicts"].items()):
        if nid not in view.active and nid not in state["clocks"] and now - v.at > VERDICT_MEMORY_S:
            del state["verdicts"][nid]
            state["escalated"].pop(nid, None)
            changed = True
    return changed


def escalations(state: dict[str, Any], active: dict[str, Notice]) -> dict[str, Escalation]:
    """What the level-triggered ``escalate`` message says: the highest level of every open or
    overrun notice."""
    out = {}
    for nid, seen in state["escalated"].items():
        if nid not in active or settled(state, nid) or not seen:
            continue
        level = max(seen, key=LEVELS.index)
        out[nid] = Escalation(level, seen[level])
    return out


def count_rejections(state: dict[str, Any], started_at: Any, counters: Any) -> bool:
    """Add the watcher's new rejections to the persisted counters; True if there were any."""
    deltas = metrics.rejection_deltas(state["rejections_seen"], started_at, counters)
    for what, reason, n in deltas:
        metrics.inc(state["metrics"], "sco_agent_rejections_total", (what, reason), n)
    return bool(deltas)
