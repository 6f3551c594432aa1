"""The operator's view behind ``sco-agentctl status``: pure functions from the agent's files to a summary.

``summarize`` takes what the command read (supervisorctl's status lines and
the agent's state files, each possibly missing or damaged) and the time;
``render_text`` turns the summary into a few readable lines. Reading the
files and running supervisorctl is agentctl/__main__.py's job.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from common.contract import fallback_at
from common.notice import Notice, notice_from_dict
from common.timefmt import format_rfc3339
from common.verdict import VerdictRecord, decode_verdicts
from common.wire import (
    BUDGET_KEYS,
    BUILTIN_BUDGET,
    LEVELS,
    BadRecord,
    Budget,
    DrainRecord,
    Step,
    decode_records,
)
from verifier.judge import Clock, clock_for, escalation
from verifier.timeline import timeline

SHOW_REMAINING = 10


def parse_processes(lines: list[str]) -> list[dict[str, str]]:
    """``supervisorctl status`` lines -> [{"name", "state", "detail"}]; other lines kept as detail."""
    out = []
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[1].isupper():
            out.append({"name": parts[0], "state": parts[1], "detail": parts[2].strip() if len(parts) > 2 else ""})
        elif line.strip():
            out.append({"name": "", "state": "", "detail": line.strip()})
    return out


def contract_view(doc: Any) -> dict[str, Any] | None:
    """Serial and budget from contract.json, which the watcher writes as ``{"contract": ...}``
    (watcher.contract_keeper); anything else is shown as nothing.

    Only shown, never trusted: the watcher verified it before writing it.
    """
    doc = doc.get("contract") if isinstance(doc, dict) else None
    if not isinstance(doc, dict):
        return None
    drain = doc.get("drain")
    if not isinstance(drain, dict):
        drain = {}
    return {"serial": doc.get("serial"), "hall": doc.get("hall"), "source": doc.get("source"),
            **{k: drain.get(k) for k in BUDGET_KEYS}}


def _budget(cview: dict[str, Any] | None) -> Budget:
    """The shown contract's budget, to time a notice no drain record times yet (else the built-in one's)."""
    try:
        return Budget.from_dict(cview)
    except BadRecord:
        return BUILTIN_BUDGET


def _notices(doc: Any) -> list[Notice]:
    out = []
    active = doc.get("active") if isinstance(doc, dict) else None
    for d in active if isinstance(active, list) else []:
        try:
            out.append(notice_from_dict(d))
        except ValueError:
            continue
    return out


def _clock(n: Notice, verifier: dict[str, Any], rec: DrainRecord | None, budget: Budget) -> Clock:
    """The verifier's clock of ``n``; else what it would start: the drain record's budget, or the contract's."""
    saved = (verifier.get("clocks") or {}).get(n.id)
    if isinstance(saved, dict):
        try:
            return Clock.from_dict(saved)
        except (KeyError, TypeError, ValueError):
            pass
    return clock_for(n, rec, budget)


class AgentFiles(NamedTuple):
    """The agent's state files as the command read them: decoded JSON, or None when missing or
    unreadable. Any shape is accepted: a damaged file shows as "none", never as a crash."""

    notices: Any = None    # state_dir/notice.json
    contract: Any = None   # runtime_dir/contract.json
    drains: Any = None     # state_dir/executor.json
    verifier: Any = None   # state_dir/verdicts.json
    spool: dict[str, Any] | None = None   # the spool file's stats (spool.reader)


def summarize(*, node: str, hall: str, processes: list[str], files: AgentFiles, now: float) -> dict[str, Any]:
    verifier = files.verifier if isinstance(files.verifier, dict) else {}
    verdicts = decode_verdicts(verifier.get("verdicts"))[0]
    records = decode_records(files.drains)[0] if isinstance(files.drains, dict) else {}
    cview = contract_view(files.contract)
    active = []
    for n in _notices(files.notices):
        rec = records.get(n.id)
        clock = _clock(n, verifier, rec, _budget(cview))
        remaining = rec.remaining if rec is not None else None
        level = escalation(clock, now)
        verdict = verdicts.get(n.id)
        active.append({
            "id": n.id, "kind": n.kind, "channel": n.channel, "deadline": format_rfc3339(n.deadline),
            "seconds_left": round(n.deadline - now, 1), "cutoff_in_s": round(clock.cutoff - now, 1),
            "escalation": level.level if level else None, "drain_state": rec.state if rec is not None else None,
            "remaining_count": len(remaining) if remaining is not None else None,
            "remaining": remaining[:SHOW_REMAINING] if remaining is not None else None,
            "verdict": (verdict.outcome or None) if verdict is not None else None,
            "timeline_ms": timeline(n, rec),
            "fallback": fallback_view(n, rec, now),
            "start": start_view(n, rec, now),
            "problem": rec.problem if rec is not None and rec.problem else None,
        })
    return {"node": node, "hall": hall, "processes": parse_processes(processes), "contract": cview,
            "active": active, "last_verdict": last_verdict(verdicts), "spool": files.spool}


def fallback_view(n: Notice, rec: DrainRecord | None, now: float) -> dict[str, Any] | None:
    """When the drain would go around an unreachable scheduler (common.wire.fallback_at), whether
    it has, or why it never would; None before the drain has started."""
    if rec is None:
        return None
    if Step.FALLBACK in rec.steps:
        return {"state": "ran", "at": format_rfc3339(rec.steps[Step.FALLBACK])}
    if not rec.fallback_allowed:
        return {"state": "never", "why": f"the contract allows no fallback for a {rec.kind} notice"}
    at = fallback_at(n.deadline, rec.fallback_lead_s)
    return {"state": "armed", "at": format_rfc3339(at), "in_s": round(at - now, 1),
            "lead_s": rec.fallback_lead_s}


def start_view(n: Notice, rec: DrainRecord | None, now: float) -> dict[str, Any] | None:
    """When the notice's drain starts (the contract's ``start`` for its kind, frozen in the record):
    it has (``started``), it will (``deferred``: at deadline - budget_s, the node cordoned meanwhile),
    or it never moves work (``cordon_only``, ``ignored``); None before the drain record exists."""
    if rec is None:
        return None
    if rec.policy != "drain":
        return {"state": "cordon_only" if rec.policy == "cordon" else "ignored"}
    if rec.begun():
        at = rec.steps.get(Step.DEFERRED_STARTED, rec.received_at)
        return {"state": "started", "at": format_rfc3339(at), "rule": rec.drain_start}
    at = rec.begins_at(n.deadline)
    return {"state": "deferred", "at": format_rfc3339(at), "in_s": round(at - now, 1), "rule": rec.drain_start}


def _start_text(s: dict[str, Any]) -> str:
    if s["state"] == "started":
        return f"; drain started at {s['at']}"
    if s["state"] == "deferred":
        return f"; drain starts at {s['at']} (in {s['in_s']} s, deadline - budget), the node cordoned meanwhile"
    if s["state"] == "cordon_only":
        return "; cordon only: the contract moves no work for this kind"
    return "; ignored: the contract does nothing for this kind"


def last_verdict(verdicts: dict[str, VerdictRecord]) -> dict[str, Any] | None:
    """The latest verdict (verdicts.json, read through common.verdict's codec), as shown."""
    if not verdicts:
        return None
    v = max(verdicts.values(), key=lambda r: r.at)
    return {"notice_id": v.notice_id, "outcome": v.outcome, "held_up_by": v.held_up_by,
            "at": format_rfc3339(v.at), "left_count": v.left_count,
            "left": list(v.left[:SHOW_REMAINING]), "timeline_ms": v.timeline_ms,
            "detach_ms": v.detach_ms, "volumes": list(v.volumes), "volumes_count": v.volumes_count,
            "pods": [p.to_dict() for p in v.pods[:SHOW_REMAINING]], "pods_count": v.pods_count}


def _timeline_text(tl: dict[str, Any] | None) -> str:
    if not tl:
        return "(none)"
    parts = []
    for key, value in tl.items():
        if key == "received" and isinstance(value, dict):
            parts += [f"received/{ch} {ms:+d}" for ch, ms in value.items()]
        elif key == "checkpoint_acks" and isinstance(value, list):
            parts += [f"ack {a.get('client')} {a.get('status')} {a.get('ms'):+d}" for a in value[:SHOW_REMAINING]]
        elif isinstance(value, int):
            parts.append(f"{key} {value:+d}")
    return ", ".join(parts)


def render_text(s: dict[str, Any]) -> str:
    lines = [f"node {s['node']} (hall {s['hall']})", "processes:"]
    lines += [f"  {p['name']:<10} {p['state']:<9} {p['detail']}".rstrip()
              for p in s["processes"] or [{"name": "", "state": "", "detail": "(none reported)"}]]
    lines.append(_contract_line(s["contract"]))
    if not s["active"]:
        lines.append("active notice: none")
    for a in s["active"]:
        lines += _active_lines(a)
    lines += _verdict_lines(s["last_verdict"])
    sp = s["spool"]
    if sp is not None:
        lines.append("spool: " + ", ".join(f"{k} {v}" for k, v in sp.items()))
    return "\n".join(lines) + "\n"


def _contract_line(c: dict[str, Any] | None) -> str:
    if not c:
        return "contract: none on disk (built-in budget)"
    if "error" in c:
        return f"contract: {c['error']}"
    return (f"contract: serial {c['serial']}, budget {c['budget_s']} s (checkpoint {c['checkpoint_s']} s, "
            f"evict {c['evict_s']} s, margin {c['margin_s']} s)")


def _active_lines(a: dict[str, Any]) -> list[str]:
    state = f"  drain: {a['drain_state'] or 'not started'}"
    st = a.get("start")
    if st:
        state += _start_text(st)
    if a["escalation"]:
        state += f", escalation {a['escalation']} ({LEVELS.index(a['escalation']) + 1}/3)"
    if a["verdict"]:
        state += f", verdict {a['verdict']}"
    if a["remaining_count"] is not None:
        state += f", {a['remaining_count']} left" + (f": {' '.join(a['remaining'])}" if a["remaining"] else "")
    fb = a.get("fallback")
    if fb:
        state += {"ran": lambda: f"; fallback ran at {fb['at']}",
                  "never": lambda: f"; no fallback ({fb['why']})",
                  "armed": lambda: f"; fallback if the API server stays unreachable: at {fb['at']} "
                                   f"(in {fb['in_s']} s, {fb['lead_s']:g} s before the deadline)"}[fb["state"]]()
    if a.get("problem"):
        state += f"; configuration error: {a['problem']}"
    head = (f"active notice: {a['id']} {a['kind']} via {a['channel']}, deadline {a['deadline']} "
            f"({a['seconds_left']} s left, cutoff in {a['cutoff_in_s']} s)")
    return [head, state,
            f"  timeline (ms after issue): {_timeline_text(a['timeline_ms'])}"]


def _verdict_lines(v: dict[str, Any] | None) -> list[str]:
    if not v:
        return ["last verdict: none"]
    held = f" held up by {v['held_up_by']}, {v['left_count']} left" if v["outcome"] == "overrun" else ""
    lines = [f"last verdict: {v['notice_id']} {v['outcome']} at {v['at']}{held}",
             f"  timeline (ms after issue): {_timeline_text(v['timeline_ms'])}"]
    if v.get("volumes_count"):
        lines.append(f"  volumes still attached ({v['volumes_count']}): {', '.join(v['volumes'])}")
    elif v.get("detach_ms") is not None:
        lines.append(f"  volumes detached {v['detach_ms']} ms after the node was empty")
    if v.get("pods_count"):
        shown = ", ".join(f"{p['pod']} {p['outcome']}" + (f" (held: {p['held']})" if p.get("held") else "")
                          for p in v["pods"])
        lines.append(f"  pods ({v['pods_count']}): {shown}" + (" ..." if v["pods_count"] > len(v["pods"]) else ""))
    return lines
