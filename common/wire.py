"""The records that cross a process boundary, each defined once here with its codec (pure: no I/O).

What each JSON object between the processes holds, as a typed record and back, so no process
reads another's dict by hand: the watcher's contract message (``contract``; its notice state,
topic ``notice``, is common/notice_state.py, and the progress message common/progress.py); the executor's ``DrainRecord`` (``executor.json``, topic ``progress``) with
its step, state and phase names; ``Budget`` and ``phase_ends``, the one formula the executor, its
Slurm rules and the verifier all time a drain by; the escalation levels (``escalate``); the ``Verdict``.

Decoders raise ``BadRecord`` (a ValueError whose ``reason`` is a bounded counter label); where a
message carries many records, one bad record is refused alone (returned in ``refused``) and never
hides the good ones next to it.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import ujson

from common.contract import AT_ONCE, BUILTIN, MAX_BUDGET_S, STARTS, Contract, Drain
from common.notice import Notice
from common.pod_fate import PodFate
from common.timefmt import MAX_EPOCH, MIN_EPOCH
from common.verdict import DONE, OVERRUN, Verdict  # noqa: F401 -- where they were before common/verdict.py


class BadRecord(ValueError):
    """A record that is not what its codec says; ``reason`` is a bounded label (as ``ipc.BadMessage``'s)."""

    def __init__(self, detail: str, reason: str = "bad_shape") -> None:
        super().__init__(detail)
        self.reason = reason


def _number(x: object) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _epoch(x: object) -> bool:
    """A time that can be written down (years 0001..9999): anything else would overflow the
    durations computed from it (the verifier's timeline, a cutoff)."""
    return _number(x) and MIN_EPOCH <= x < MAX_EPOCH


# -- how large a message may grow: each within common.ipc.MAX_MESSAGE (the notice state's budget is
# in common/notice_state.py, the progress message's in common/progress.py) ------------------------

def encoded_size(value: object) -> int:
    """Bytes ``value`` takes in a message (as common.ipc.encode writes it)."""
    return len(ujson.dumps(value, ensure_ascii=False, escape_forward_slashes=False).encode("utf-8"))


# -- the budget and the phase ends ----------------------------------------------------------

BUDGET_KEYS = ("budget_s", "checkpoint_s", "evict_s", "margin_s")


@dataclass(frozen=True, slots=True)
class Budget:
    """A contract's drain budget in seconds, frozen for one drain: checkpoint, evict, margin."""

    budget_s: float
    checkpoint_s: float
    evict_s: float
    margin_s: float

    @classmethod
    def of(cls, drain: Drain) -> Budget:
        return cls(drain.budget_s, drain.checkpoint_s, drain.evict_s, drain.margin_s)

    def to_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in BUDGET_KEYS}

    @classmethod
    def from_dict(cls, d: object) -> Budget:
        # A contract's budget is at most MAX_BUDGET_S: a larger one would push the times computed
        # from it (checkpoint_by, the cutoffs) out of what can be written down.
        if not isinstance(d, dict) or not all(_number(d.get(k)) and 0 <= d[k] <= MAX_BUDGET_S for k in BUDGET_KEYS):
            raise BadRecord(f"budget must hold {BUDGET_KEYS}, each 0..{MAX_BUDGET_S} s")
        return cls(*(d[k] for k in BUDGET_KEYS))


BUILTIN_BUDGET = Budget.of(BUILTIN.drain)


@dataclass(frozen=True, slots=True)
class PhaseEnds:
    """When a notice's drain phases end, on our clock (epoch seconds)."""

    checkpoint_by: float   # workloads may checkpoint until then; then evict / requeue
    evict_at: float        # eviction by the book ends: blocked pods are deleted or reported, jobs killed
    cutoff: float          # deadline - margin: the node must be empty by then


def phase_ends(received_at: float, deadline: float, budget: Budget) -> PhaseEnds:
    """Checkpoint, evict, margin, in that order from receipt; every end clamped to the cutoff, so a
    short notice (GCP's 30 s) squeezes the later phases instead of running past the deadline."""
    cut = deadline - budget.margin_s
    checkpoint_by = min(received_at + budget.checkpoint_s, cut)
    evict_at = max(min(received_at + budget.checkpoint_s + budget.evict_s, cut), checkpoint_by)
    return PhaseEnds(checkpoint_by, evict_at, cut)


# -- the drain record (executor.json, topic ``progress``) ------------------------------------

class Step:
    """The names in ``DrainRecord.steps`` (step -> epoch of the last time it was done)."""

    LB_EXCLUDED = "lb_excluded"
    CORDONED = "cordoned"            # Kubernetes cordon (and taint) / Slurm DRAIN
    CLIENTS_TOLD = "clients_told"    # the agent socket's clients heard the notice
    SIGNALLED = "signalled"          # Slurm: a job told to checkpoint, or killed
    EVICTED = "evicted"              # Kubernetes: the last accepted eviction
    DELETED = "deleted"              # a PDB-blocked pod deleted / a Slurm job cancelled
    REQUEUED = "requeued"            # Slurm: the last requeue
    FALLBACK = "fallback"            # the scheduler did not answer: the drain went around it
    RECONCILED = "reconciled"        # it answered again
    NODE_EMPTY = "node_empty"
    CONFIG_ERROR = "config_error"    # the scheduler refused the agent's credentials (401/403/TLS)
    UNCORDONED = "uncordoned"        # a withdrawn notice's node steps undone
    DEFERRED_STARTED = "deferred_started"   # a deferred drain's start (deadline - budget_s) came: it drains


class DrainState:
    """``DrainRecord.state``: only a running drain is advanced."""

    RUNNING = "running"
    DONE = "done"                    # the node is empty
    CORDONED_ONLY = "cordoned_only"  # the contract's policy for the kind was cordon
    ENDED = "ended"                  # gave up well past the deadline (the machine is gone)
    WITHDRAWN = "withdrawn"
    DRY_RUN = "dry_run"              # a dry run spooled its plan and stopped: nothing was done
    IGNORED = "ignored"              # the contract's policy for the kind was ignore: nothing was done
    # Not an end: a deferred drain (the contract's start 'deadline_minus_budget') whose node is
    # cordoned and whose start has not come; it runs again from then (DrainRecord.begins_at).
    WAITING = "waiting"
    ENDS = (DONE, CORDONED_ONLY, ENDED, DRY_RUN, IGNORED)


class Phase:
    """``DrainRecord.phase``: the step in progress, as the verifier blames it."""

    CORDON = "cordon"
    CHECKPOINT = "checkpoint"
    EVICT = "evict"
    REQUEUE = "requeue"
    KILL = "kill"
    FALLBACK = "fallback"


@dataclass(frozen=True, slots=True)
class Ack:
    """A checkpoint ack from an agent-socket client."""

    status: str
    at: float


@dataclass(slots=True)
class DrainRecord:
    """One notice's drain. Kept by the executor's loop (the only writer), read by the verifier,
    the watcher and ``sco-agentctl status``.

    The contract's choices are frozen in it when the drain starts, so a contract landing
    meanwhile changes nothing about a running drain. ``memo`` is the scheduler's own memory
    (Kubernetes: pods evicted, deleted, reported; Slurm: jobs signalled, requeued, ...): written
    flat into the JSON object next to the fields here, read only by the scheduler's adapter.
    """

    kind: str
    received_at: float
    budget: Budget
    policy: str                                  # drain | cordon | ignore (the contract's, for the kind)
    taint_key: str
    state: str = DrainState.RUNNING
    steps: dict[str, float] = field(default_factory=dict)
    remaining: list[str] | None = None           # what still counts on the node; None: not read yet
    phase: str = ""
    acks: dict[str, Ack] = field(default_factory=dict)   # "name:pid" -> the client's ack
    contract_serial: int | None = None
    pdb_blocked: str = BUILTIN.pdb_blocked
    exclude_from_lb: bool = BUILTIN.exclude_from_lb
    memo: dict[str, Any] = field(default_factory=dict)
    fallback_allowed: bool = False               # the contract lets this kind go around the scheduler
    fallback_lead_s: float = float(BUILTIN.fallback.lead_s)
    problem: str = ""                            # a configuration error the scheduler reported
    drain_start: str = AT_ONCE                   # at_once | deadline_minus_budget (the contract's ``start``, for the kind)
    # ns/name -> what the drain did to that pod (Kubernetes; the verdict lists them, issue 28).
    pods: dict[str, PodFate] = field(default_factory=dict)
    pods_cut: int = 0                            # of ``pods``: left out of this message (common.progress)

    @classmethod
    def start(cls, n: Notice, contract: Contract) -> DrainRecord:
        """A new drain of ``n`` on ``contract``'s budget and choices."""
        return cls(kind=n.kind, received_at=n.received_at, budget=Budget.of(contract.drain),
                   policy=contract.action_for(n.kind), taint_key=contract.taint_key,
                   contract_serial=contract.serial, pdb_blocked=contract.pdb_blocked,
                   exclude_from_lb=contract.exclude_from_lb,
                   fallback_allowed=n.kind in contract.fallback.kinds,
                   fallback_lead_s=float(contract.fallback.lead_s), drain_start=contract.start_for(n.kind))

    @property
    def deferred(self) -> bool:
        """A drain that starts at ``deadline - budget_s``, not at once (the contract's ``start``)."""
        return self.drain_start != AT_ONCE

    def begins_at(self, deadline: float) -> float:
        """When the drain's phases begin: at receipt, or for a deferred drain at ``deadline -
        budget_s`` (at receipt if that has passed), so its workloads run until then."""
        if not self.deferred:
            return self.received_at
        return max(self.received_at, deadline - self.budget.budget_s)

    def begun(self) -> bool:
        """May the drain move work (evict, requeue)? At once; a deferred one once its start came."""
        return not self.deferred or Step.DEFERRED_STARTED in self.steps

    def ends(self, deadline: float) -> PhaseEnds:
        return phase_ends(self.begins_at(deadline), deadline, self.budget)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.memo)
        d.update(kind=self.kind, state=self.state, steps=dict(self.steps), received_at=self.received_at,
                 remaining=None if self.remaining is None else list(self.remaining), policy=self.policy,
                 taint_key=self.taint_key, budget=self.budget.to_dict(), pdb_blocked=self.pdb_blocked,
                 exclude_from_lb=self.exclude_from_lb, phase=self.phase,
                 acks={k: {"status": a.status, "at": a.at} for k, a in self.acks.items()},
                 fallback_allowed=self.fallback_allowed, fallback_lead_s=self.fallback_lead_s, problem=self.problem,
                 drain_start=self.drain_start)
        if self.contract_serial is not None:
            d["contract_serial"] = self.contract_serial
        if self.pods:
            d["pods"] = {k: f.to_dict() for k, f in self.pods.items()}
        if self.pods_cut:
            d["pods_cut"] = self.pods_cut
        return d

    @classmethod
    def from_dict(cls, d: object, defaults: Contract = BUILTIN,
                  memo_problem: Callable[[dict[str, Any]], str] | None = None) -> DrainRecord:
        """Decode and check the whole record, or BadRecord saying why it cannot be used: the executor
        uses every field unchecked while it drains, and a wrong type (a hand edit, a disk returning
        garbage) would crash it one step later -- and a restart reads the same file again. Fields an
        older executor did not write take ``defaults``' choices; ``memo_problem`` checks the memo."""
        why = _problem(d)
        if why:
            raise BadRecord(why)
        if not isinstance(d, dict):   # _problem refuses a non-object; said again for the type checker
            raise BadRecord("not an object")
        memo = {k: v for k, v in d.items() if k not in _OWN}
        why = memo_problem(memo) if memo_problem is not None else ""
        if why:
            raise BadRecord(why)
        remaining = d.get("remaining")
        acks = d.get("acks") or {}
        return cls(
            kind=d["kind"], received_at=d["received_at"], budget=Budget.from_dict(d["budget"]), policy=d["policy"],
            taint_key=d["taint_key"], state=d["state"], steps=dict(d["steps"]),
            remaining=None if remaining is None else [str(x) for x in remaining], phase=d.get("phase", ""),
            acks={str(k): Ack(str(a.get("status", "")), a["at"] if _epoch(a.get("at")) else 0.0)
                  for k, a in acks.items() if isinstance(a, dict)},
            contract_serial=d.get("contract_serial"), pdb_blocked=d.get("pdb_blocked", defaults.pdb_blocked),
            exclude_from_lb=d.get("exclude_from_lb", defaults.exclude_from_lb), memo=memo,
            fallback_allowed=d.get("fallback_allowed", d["kind"] in defaults.fallback.kinds),
            fallback_lead_s=float(d.get("fallback_lead_s", defaults.fallback.lead_s)), problem=d.get("problem", ""),
            drain_start=d.get("drain_start", AT_ONCE),   # a record written before starts existed began at once
            pods=PodFate.decode_all(d.get("pods") or {}), pods_cut=max(0, d.get("pods_cut", 0)))



_REQUIRED = ("kind", "state", "steps", "received_at", "policy", "taint_key", "budget")
_TEXT = ("kind", "state", "policy", "taint_key")
_OPTIONAL_TYPES: dict[str, tuple[type, ...]] = {
    "phase": (str,), "remaining": (list, type(None)), "acks": (dict,), "pdb_blocked": (str,),
    "exclude_from_lb": (bool,), "contract_serial": (int,), "fallback_allowed": (bool,),
    "fallback_lead_s": (int, float), "problem": (str,), "drain_start": (str,), "pods": (dict,),
    "pods_cut": (int,)}
_OWN = frozenset(_REQUIRED) | frozenset(_OPTIONAL_TYPES)


def _out_of_range(rec: dict[str, Any]) -> list[str]:
    """The fields of the right type whose value is not one they may hold."""
    bad = []
    lead = rec.get("fallback_lead_s", 0)
    if not isinstance(lead, bool) and isinstance(lead, (int, float)) and not 0 <= lead <= MAX_BUDGET_S:
        bad.append("fallback_lead_s")
    if rec.get("drain_start", AT_ONCE) not in STARTS:
        bad.append("drain_start")
    return bad


def _problem(rec: object) -> str:
    """Why ``rec`` is not a drain record, or "" if it is one."""
    if not isinstance(rec, dict):
        return "not an object"
    missing = [k for k in _REQUIRED if k not in rec]
    if missing:
        return f"missing {missing}"
    bad = [k for k in _TEXT if not isinstance(rec[k], str)]
    bad += [k for k, types in _OPTIONAL_TYPES.items() if k in rec and not isinstance(rec[k], types)]
    for key in ("contract_serial", "fallback_lead_s", "pods_cut"):
        if isinstance(rec.get(key), bool):
            bad.append(key)
    bad += _out_of_range(rec)
    if bad:
        return f"wrong type: {bad}"
    if not _epoch(rec["received_at"]):
        return "received_at is not a time"
    steps = rec["steps"]
    if not isinstance(steps, dict) or not all(_epoch(t) for t in steps.values()):
        return "steps must map step names to times"
    try:
        Budget.from_dict(rec["budget"])
    except BadRecord as e:
        return str(e)
    return ""


def encode_records(records: Mapping[str, DrainRecord]) -> dict[str, Any]:
    """executor.json's object: every record whole, its scheduler's memo included."""
    return {nid: rec.to_dict() for nid, rec in records.items()}


def decode_records(doc: object, defaults: Contract = BUILTIN,
                   memo_problem: Callable[[dict[str, Any]], str] | None = None,
                   ) -> tuple[dict[str, DrainRecord], dict[str, str]]:
    """``{id: record}`` -> (the usable records, id -> why each other one was refused)."""
    if not isinstance(doc, dict):
        raise BadRecord("drain records: not an object")
    kept: dict[str, DrainRecord] = {}
    refused: dict[str, str] = {}
    for nid, d in doc.items():
        try:
            kept[str(nid)] = DrainRecord.from_dict(d, defaults, memo_problem)
        except BadRecord as e:
            refused[str(nid)] = str(e)
    return kept, refused


# -- the contract (topic ``contract``) ---------------------------------------------------------

def encode_contract(contract: Contract) -> dict[str, Any]:
    """The ``contract`` message: the contract's source and its payload."""
    return {"source": contract.source, "contract": contract.to_dict()}


def decode_contract(body: Mapping[str, Any]) -> Contract:
    """ValueError naming the first bad field (common.contract validates the payload)."""
    return Contract.from_payload(body.get("contract"), str(body.get("source", "bundle")))


# -- escalation (topic ``escalate``) ----------------------------------------------------------

CHECKPOINT_OVER, EVICT_OVER, FINAL = "checkpoint_over", "evict_over", "final"
LEVELS = (CHECKPOINT_OVER, EVICT_OVER, FINAL)   # in order: each includes what the ones before ask


@dataclass(frozen=True, slots=True)
class Escalation:
    """The highest cutoff a notice has passed, by the verifier's clock, and since when."""

    level: str
    since: float


def encode_escalations(levels: Mapping[str, Escalation]) -> dict[str, Any]:
    return {"notices": {nid: {"level": e.level, "since": e.since} for nid, e in levels.items()}}


def decode_escalations(body: Mapping[str, Any]) -> dict[str, str]:
    """notice id -> level; unknown levels and shapes are skipped, a body without 'notices' refused."""
    notices = body.get("notices")
    if not isinstance(notices, dict):
        raise BadRecord("escalate: 'notices' is not an object")
    out = {}
    for nid, value in notices.items():
        level = value.get("level") if isinstance(value, dict) else value
        if level in LEVELS:
            out[str(nid)] = str(level)
    return out


# -- the verdict (the record and its outcomes: common/verdict.py) --------------------------------

# What a drain can be held up by: a bounded label set (sco_agent_verdicts_total's held_up_by).
HELD_UP_BY = ("notice", Phase.CORDON, Phase.CHECKPOINT, Phase.EVICT, Phase.REQUEUE, Phase.FALLBACK)
