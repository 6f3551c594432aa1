"""The invariants every chaos drain must keep, as pure checks over what was observed.

Each check takes plain data (events, the API server's request log, the node as
read after the faults) and returns violations as short strings; an empty list
means the drain kept its promises. No I/O here, so each check is tested on
hand-made observations (tests/chaos/test_invariants.py).

- exactly one verdict (``drain.done`` or ``drain.overrun``) per notice, counted by
  distinct ``event_id`` over the spool file and what Vector received;
- ``done``: the node ended cordoned and empty; ``overrun``: only where the plan made it
  legitimate, and with the step it was held up by;
- no pod evicted twice (at most one 201 per pod UID);
- nothing done to any other node: no write to another Node, no eviction or delete of a pod
  that is not one of this node's;
- every event the spool holds reached Vector, and no step was announced twice (both checked
  once per run, over everything spooled and received);
- counted from emission: every event a process logged as emitted (``event.emitted``, with its
  id) is in Vector, or was set aside (a ``spool.poison`` event names it), or is one of those
  ``spool.dropped`` counts -- never more missing than dropped.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import ujson

# "unverified": the executor said empty, the verifier's own read of the scheduler did not agree or
# could not be made (issue 16) -- legitimate only under a fault, like an overrun, and with its reason.
# "volumes_attached": the node was empty in time but volumes stayed attached past the margin (issue 28).
VERDICTS = ("drain.done", "drain.overrun", "drain.unverified", "drain.volumes_attached")
WRITES = ("POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True, slots=True)
class Observed:
    """One drain as seen after its faults were reverted."""

    notice_id: str
    verdicts: tuple[dict[str, Any], ...]      # verdict events of this notice, one per distinct event_id
    overrun_allowed: bool
    cordoned: bool                             # the node's spec.unschedulable (Kubernetes) / DRAIN (Slurm)
    left: tuple[str, ...]                      # what still counts on the node
    extra: tuple[str, ...] = field(default=())  # violations found by scheduler-specific checks


def verdicts_of(events: Iterable[dict[str, Any]], notice_id: str) -> tuple[dict[str, Any], ...]:
    """This notice's verdict events, one per event_id (a resend of one verdict is not a second)."""
    seen: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("type") in VERDICTS and e.get("notice_id") == notice_id:
            seen.setdefault(str(e.get("event_id")), e)
    return tuple(seen.values())


def check_verdict(obs: Observed) -> list[str]:
    if len(obs.verdicts) != 1:
        kinds = sorted(e["type"] for e in obs.verdicts)
        return [f"{obs.notice_id}: {len(obs.verdicts)} verdicts {kinds}, expected exactly one"]
    verdict = obs.verdicts[0]
    if verdict["type"] == "drain.done":
        out = []
        if not obs.cordoned:
            out.append(f"{obs.notice_id}: done, but the node is not cordoned")
        if obs.left:
            out.append(f"{obs.notice_id}: done, but {list(obs.left)} still on the node")
        return out
    data = verdict.get("data") or {}
    out = []
    if verdict["type"] == "drain.volumes_attached":
        return [] if obs.overrun_allowed and data.get("volumes") else [
            f"{obs.notice_id}: volumes_attached ({data.get('volumes')}) without a fault or without the volumes named"]
    if verdict["type"] == "drain.unverified":
        if not obs.overrun_allowed:
            out.append(f"{obs.notice_id}: unverified ({data.get('reason')!r}) without a fault that makes it legitimate")
        if not data.get("reason"):
            out.append(f"{obs.notice_id}: unverified without a reason")
        return out
    if not obs.overrun_allowed:
        out.append(f"{obs.notice_id}: overrun (held up by {data.get('held_up_by')!r}, left {data.get('left')}) "
                   "without a fault that makes it legitimate")
    if not data.get("held_up_by"):
        out.append(f"{obs.notice_id}: overrun without held_up_by")
    return out


def check(obs: Observed) -> list[str]:
    return check_verdict(obs) + list(obs.extra)


# -- the API server's request log ----------------------------------------------------------
def _parts(entry: dict[str, Any]) -> list[str]:
    return str(entry.get("path", "")).split("?")[0].strip("/").split("/")


def eviction_uid(entry: dict[str, Any]) -> str:
    body = entry.get("body")
    if not isinstance(body, dict):
        return ""
    options = body.get("deleteOptions") or {}
    return str((options.get("preconditions") or {}).get("uid", ""))


def duplicate_evictions(log: Iterable[dict[str, Any]]) -> list[str]:
    """Pods evicted (201) more than once, by the UID in the eviction's precondition."""
    accepted: Counter[str] = Counter()
    names: dict[str, str] = {}
    for e in log:
        parts = _parts(e)
        if e.get("method") == "POST" and len(parts) == 7 and parts[6] == "eviction" and e.get("status") == 201:
            uid = eviction_uid(e) or f"{parts[3]}/{parts[5]}"
            accepted[uid] += 1
            names[uid] = f"{parts[3]}/{parts[5]}"
    return [f"pod {names[uid]} (uid {uid}) evicted {n} times" for uid, n in sorted(accepted.items()) if n > 1]


def foreign_writes(log: Iterable[dict[str, Any]], own_node: str, own_pods: set[str]) -> list[str]:
    """Writes aimed anywhere but this node: another Node, or a pod (namespace/name) not on this node."""
    out = []
    for e in log:
        if e.get("method") not in WRITES:
            continue
        parts = _parts(e)
        what = f"{e.get('method')} {e.get('path')} -> {e.get('status')}"
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) >= 4 and parts[3] != own_node:
            out.append(f"wrote another node: {what}")
        elif (len(parts) >= 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods"
              and f"{parts[3]}/{parts[5]}" not in own_pods):
            out.append(f"touched a pod not on this node: {what}")
    return out


# -- the whole run --------------------------------------------------------------------------
def emitted_ids(log_lines: Iterable[str]) -> list[str]:
    """The ids a process logged as emitted (``event.emitted`` lines of its stderr), in order."""
    out = []
    for line in log_lines:
        if '"event.emitted"' not in line:
            continue
        try:
            rec = ujson.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("msg") == "event.emitted" and isinstance(rec.get("event_id"), str):
            out.append(rec["event_id"])
    return out


@dataclass(frozen=True, slots=True)
class FromEmission:
    """What became of every emitted event, at the end of a run."""

    emitted: int
    delivered: int        # distinct emitted ids Vector received
    poisoned: int         # emitted ids a spool.poison event set aside
    dropped: int          # the spool.dropped counts (records the full ring let go)
    missing: tuple[str, ...]   # emitted, not delivered, not set aside

    @property
    def unaccounted(self) -> int:
        """Missing beyond what spool.dropped accounts for: lost without a word."""
        return max(0, len(self.missing) - self.dropped)


def from_emission(emitted: Iterable[str], received: Iterable[dict[str, Any]]) -> FromEmission:
    """Account for every emitted id against what Vector received (its spool.poison and spool.dropped too)."""
    wanted = list(dict.fromkeys(emitted))
    got: set[str] = set()
    poisoned: set[str] = set()
    dropped_by: dict[str, int] = {}
    for r in received:
        got.add(str(r.get("event_id")))
        data = r.get("data") or {}
        if r.get("type") == "spool.poison":
            poisoned.add(str(data.get("event_id")))
        elif r.get("type") == "spool.dropped":
            dropped_by[str(r.get("event_id"))] = int(data.get("dropped", 0))
    missing = tuple(e for e in wanted if e not in got and e not in poisoned)
    return FromEmission(len(wanted), sum(1 for e in wanted if e in got), sum(1 for e in wanted if e in poisoned),
                        sum(dropped_by.values()), missing)


def lost_events(spooled: Iterable[str], shipped: Iterable[str]) -> set[str]:
    """Event ids in the spool file that Vector never received."""
    return set(spooled) - set(shipped)


# Steps the agent takes once per notice: each is announced once (docs/internals.md, "nothing is done
# or announced twice"), per pod for evictions, per level for escalations, and on Slurm per phase for the
# fallback (checkpoint signal, TERM, KILL: docs/slurm-drain.md; Kubernetes has one, without a phase).
ONCE = ("notice.received", "verifier.clock_started", "drain.started", "drain.cordoned", "drain.clients_told",
        "drain.node_empty", "drain.uncordoned")
ONCE_PER = {"drain.evicted": "uid", "drain.deleted": "uid", "drain.escalated": "escalation", "drain.fallback": "phase"}


def repeated_steps(events: Iterable[dict[str, Any]], notice_ids: Iterable[str]) -> list[str]:
    """Steps announced more than once for a notice (distinct event ids; a resend is one event)."""
    wanted = set(notice_ids)
    seen: dict[tuple[str, str, str], set[str]] = {}
    for e in events:
        nid, type_ = e.get("notice_id"), e.get("type")
        if nid not in wanted:
            continue
        if type_ in ONCE:
            key = (nid, type_, "")
        elif type_ in ONCE_PER:
            key = (nid, type_, str((e.get("data") or {}).get(ONCE_PER[type_])))
        else:
            continue
        seen.setdefault(key, set()).add(str(e.get("event_id")))
    return [f"{nid}: {type_}{' ' + what if what else ''} announced {len(ids)} times"
            for (nid, type_, what), ids in sorted(seen.items()) if len(ids) > 1]


def verdict_counts(events: Iterable[dict[str, Any]], notice_ids: Iterable[str]) -> dict[str, int]:
    """Distinct verdict events per notice (for the end-of-run recount over everything received)."""
    events = list(events)
    return {nid: len(verdicts_of(events, nid)) for nid in notice_ids}
