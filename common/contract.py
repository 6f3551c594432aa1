"""The contract: what this node promises to do when a notice arrives.

A contract fixes the drain budget and its phases, which notice kinds drain,
how workloads are told to checkpoint, and what to do when a PodDisruptionBudget
blocks an eviction. The watcher obtains it (signed launch subset, then the
signed bundle every 60 s, see ``watcher.contract_verify``) and publishes it;
the executor and verifier rebuild it from that message with ``from_payload``.

This module is plain data and validation only. It must stay cheap to import
(no ``cryptography``, no JSON library): every agent process imports it.

Payload shape (the signed JSON object; every key other than ``serial``,
``hall``, ``issued_at`` and ``drain`` may be left out and then takes the value
of ``BUILTIN``; ``kinds``, ``start``, ``slurm`` and ``fallback`` may also be partial)::

    {"serial": 7, "hall": "fra1", "node_class": "*", "issued_at": "2026-11-29T12:00:00Z",
     "drain": {"budget_s": 100, "checkpoint_s": 40, "evict_s": 50, "margin_s": 10},
     "taint_key": "sco.io/notice", "checkpoint_signal": "SIGTERM",
     "kinds": {"reclaim": "drain", "rebalance": "cordon", "maintenance": "drain",
               "live_migration": "ignore", "pause": "ignore"},
     "start": {"reclaim": "at_once", "maintenance": "deadline_minus_budget"},
     "pdb_blocked": "report", "exclude_from_lb": false,
     "fallback": {"kinds": ["reclaim"], "lead_s": 10},
     "slurm": {"signal": "SIGTERM", "signal_scope": "full", "on_drain": "requeue"},
     "sink_url": null, "first_write_spread_ms": 1000}

Unknown keys are refused, never ignored: a misspelt ``budget`` that silently
fell back to a default would change the drain budget without anyone noticing,
whereas a refused bundle is counted and leaves the node on its last good one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common import contract_fields as check
from common.timefmt import format_rfc3339

# Where a contract came from. 'builtin' is never authoritative: any verified
# bundle replaces it; 'launch' is the subset cloud-init wrote, superseded by a
# full bundle of the same serial; 'bundle' is a verified fetched (or LKG) bundle.
SOURCES = ("builtin", "launch", "bundle")

# Notice kinds a contract sets a policy for ('cancel' withdraws a notice, it has no policy).
# 'live_migration' (GCP MIGRATE_ON_HOST_MAINTENANCE) and 'pause' (Azure Freeze): the VM survives,
# with a blackout of seconds; the built-in contract ignores both (watcher/providers cite why).
KINDS = ("reclaim", "rebalance", "maintenance", "live_migration", "pause")
ACTIONS = ("drain", "cordon", "ignore")
# When a drain starts (DESIGN section 9, "When the drain starts"): 'at_once' when the notice
# arrives; 'deadline_minus_budget' at ``deadline - drain.budget_s``, the node cordoned at once (new
# work kept off) and its running work left to run until then. Only a kind whose action is 'drain'
# has a start: 'cordon' is cordon only, 'ignore' nothing.
AT_ONCE, DEADLINE_MINUS_BUDGET = "at_once", "deadline_minus_budget"
STARTS = (AT_ONCE, DEADLINE_MINUS_BUDGET)
PDB_BLOCKED = ("delete", "report")
SIGNAL_SCOPES = ("batch", "full")
SLURM_ON_DRAIN = ("requeue", "cancel")

MAX_BUDGET_S = 3600  # Azure's longest scheduled-event notice is 15 min; an hour is generous.
# The hall's agents spread their first API write over at most this (issue 19): more would cordon
# too late to keep new pods off a node whose notice is 25 s long.
MAX_FIRST_WRITE_SPREAD_MS = 10_000


@dataclass(frozen=True, slots=True)
class Drain:
    """The drain budget and its phases, in seconds, run in this order before the deadline."""

    budget_s: int
    checkpoint_s: int
    evict_s: int
    margin_s: int


@dataclass(frozen=True, slots=True)
class SlurmPolicy:
    """How a Slurm node tells its jobs to checkpoint and moves them off."""

    signal: str  # sent with `scancel --signal=<name without SIG>`
    signal_scope: str  # 'batch': the batch shell only; 'full': the shell and every step
    on_drain: str  # 'requeue' the job elsewhere or 'cancel' it


@dataclass(frozen=True, slots=True)
class Fallback:
    """When the drain may go around an unreachable API server with the local mechanism
    (Kubernetes: ``systemctl poweroff``, which the kubelet's graceful node shutdown turns into
    a drain). ``kinds``: the notice kinds that may use it; ``lead_s``: the time that mechanism
    needs before the deadline (the kubelet's shutdownGracePeriod)."""

    kinds: tuple[str, ...]
    lead_s: int


@dataclass(frozen=True, slots=True)
class LocalPods:
    """Pods kubectl's drain refuses, on a ``rebalance`` or ``maintenance`` drain (a ``reclaim``
    evicts them whatever this says: the machine's disk goes with it). The names are kubectl's
    flags: ``delete_emptydir_data`` evicts pods with emptyDir volumes (their data is lost),
    ``force`` pods no controller recreates. Both off (kubectl's default): kept and reported."""

    delete_emptydir_data: bool = False
    force: bool = False


@dataclass(frozen=True, slots=True)
class Contract:
    """One validated contract. ``==`` compares content; ``source`` is not content."""

    serial: int
    hall: str
    node_class: str
    issued_at: float  # epoch seconds
    drain: Drain
    taint_key: str
    checkpoint_signal: str
    kinds: tuple[tuple[str, str], ...]  # (kind, action) for every kind in KINDS, in that order
    pdb_blocked: str
    exclude_from_lb: bool
    slurm: SlurmPolicy
    sink_url: str | None
    fallback: Fallback = Fallback(("reclaim",), 10)
    # Each agent cordons at once, then starts its evictions after a slot in [0, this) derived from
    # its node name, so a hall noticed in the same second does not evict in one burst
    # (executor.kube.pacing.eviction_spread_delay; the name is kept for the bundles signed with it).
    first_write_spread_ms: int = 1000
    local_pods: LocalPods = LocalPods()
    # (kind, start) for every kind in KINDS, in that order (STARTS); a contract signed before
    # starts existed takes BUILTIN's.
    start: tuple[tuple[str, str], ...] = ()
    source: str = field(default="bundle", compare=False)

    def action_for(self, kind: str) -> str:
        """'drain', 'cordon' or 'ignore' for a notice kind; an unknown kind drains (the safe side)."""
        for known, action in self.kinds:
            if known == kind:
                return action
        return "drain"

    def start_for(self, kind: str) -> str:
        """When a drain of ``kind`` starts (STARTS); an unknown kind at once (the safe side)."""
        for known, start in self.start:
            if known == kind:
                return start
        return AT_ONCE

    def to_dict(self) -> dict[str, Any]:
        """The payload form: ``from_payload(c.to_dict(), c.source) == c``. ``source`` is left out."""
        return {
            "serial": self.serial,
            "hall": self.hall,
            "node_class": self.node_class,
            "issued_at": format_rfc3339(self.issued_at),
            "drain": {
                "budget_s": self.drain.budget_s,
                "checkpoint_s": self.drain.checkpoint_s,
                "evict_s": self.drain.evict_s,
                "margin_s": self.drain.margin_s,
            },
            "taint_key": self.taint_key,
            "checkpoint_signal": self.checkpoint_signal,
            "kinds": dict(self.kinds),
            "start": dict(self.start),
            "pdb_blocked": self.pdb_blocked,
            "exclude_from_lb": self.exclude_from_lb,
            "slurm": {
                "signal": self.slurm.signal,
                "signal_scope": self.slurm.signal_scope,
                "on_drain": self.slurm.on_drain,
            },
            "sink_url": self.sink_url,
            "fallback": {"kinds": list(self.fallback.kinds), "lead_s": self.fallback.lead_s},
            "first_write_spread_ms": self.first_write_spread_ms,
            "local_pods": {"delete_emptydir_data": self.local_pods.delete_emptydir_data,
                           "force": self.local_pods.force},
        }

    @classmethod
    def from_payload(cls, payload: Any, source: str = "bundle") -> Contract:
        """Validate a payload object; ``ValueError`` names the first bad field."""
        if source not in SOURCES:
            raise ValueError(f"contract source must be one of {SOURCES}, got {source!r}")
        top = check.json_object(payload, "contract")
        check.no_unknown(top, _TOP_KEYS, "contract")
        drain = _parse_drain(check.required(top, "drain", "contract"))
        return cls(
            serial=check.integer(check.required(top, "serial", "contract"), "serial", 0, 2**63 - 1),
            hall=check.name_or_star(check.required(top, "hall", "contract"), "hall"),
            node_class=check.name_or_star(top.get("node_class", BUILTIN.node_class), "node_class"),
            issued_at=check.rfc3339_time(check.required(top, "issued_at", "contract"), "issued_at"),
            drain=drain,
            taint_key=check.taint_key(top.get("taint_key", BUILTIN.taint_key)),
            checkpoint_signal=check.signal_name(top.get("checkpoint_signal", BUILTIN.checkpoint_signal),
                                      "checkpoint_signal"),
            kinds=_per_kind(top.get("kinds", {}), "kinds", BUILTIN.kinds, ACTIONS),
            start=_per_kind(top.get("start", {}), "start", BUILTIN.start, STARTS),
            pdb_blocked=check.choice(top.get("pdb_blocked", BUILTIN.pdb_blocked), "pdb_blocked",
                                PDB_BLOCKED),
            exclude_from_lb=check.boolean(top.get("exclude_from_lb", BUILTIN.exclude_from_lb),
                                  "exclude_from_lb"),
            slurm=_parse_slurm(top.get("slurm", {})),
            sink_url=check.url_or_null(top.get("sink_url", BUILTIN.sink_url), "sink_url"),
            fallback=_parse_fallback(top.get("fallback", {})),
            first_write_spread_ms=check.integer(top.get("first_write_spread_ms", BUILTIN.first_write_spread_ms),
                                       "first_write_spread_ms", 0, MAX_FIRST_WRITE_SPREAD_MS),
            local_pods=_parse_local_pods(top.get("local_pods", {})),
            source=source,
        )


_TOP_KEYS = frozenset(Contract.__dataclass_fields__) - {"source"}

# The local fallback starts this long before ``deadline - lead_s``: the command itself, and
# logind and the kubelet taking over, need a moment before the kubelet's grace period runs.
FALLBACK_MARGIN_S = 2.0


def fallback_at(deadline: float, lead_s: float) -> float:
    """The earliest moment the drain may go around an unreachable API server: as late as still
    leaves the local mechanism (the kubelet's graceful shutdown) its ``lead_s`` before the deadline.
    Until then the drain waits for the server."""
    return deadline - lead_s - FALLBACK_MARGIN_S


def _parse_drain(value: Any) -> Drain:
    obj = check.json_object(value, "drain")
    check.no_unknown(obj, frozenset(Drain.__dataclass_fields__), "drain")
    budget = check.integer(check.required(obj, "budget_s", "drain"), "drain.budget_s", 1, MAX_BUDGET_S)
    phases = {
        name: check.integer(check.required(obj, name, "drain"), f"drain.{name}", 0, budget)
        for name in ("checkpoint_s", "evict_s", "margin_s")
    }
    total = sum(phases.values())
    if total > budget:
        raise ValueError(
            f"contract field 'drain': checkpoint_s + evict_s + margin_s = {total} "
            f"exceeds budget_s = {budget}"
        )
    return Drain(budget_s=budget, **phases)


def _per_kind(value: Any, field: str, builtin: tuple[tuple[str, str], ...],
              choices: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    # Partial maps are merged over the built-in ones, so a bundle that only says
    # {"rebalance": "ignore"} (``kinds``) keeps the safe choice for the other kinds, and one that
    # says only {"reclaim": "deadline_minus_budget"} (``start``) keeps a maintenance window's
    # deferred start.
    obj = check.json_object(value, field)
    check.no_unknown(obj, frozenset(KINDS), field)
    merged = dict(builtin)
    for kind, choice in obj.items():
        merged[kind] = check.choice(choice, f"{field}.{kind}", choices)
    return tuple((kind, merged[kind]) for kind in KINDS)


def _parse_slurm(value: Any) -> SlurmPolicy:
    obj = check.json_object(value, "slurm")
    check.no_unknown(obj, frozenset(SlurmPolicy.__dataclass_fields__), "slurm")
    base = BUILTIN.slurm
    return SlurmPolicy(
        signal=check.signal_name(obj.get("signal", base.signal), "slurm.signal"),
        signal_scope=check.choice(obj.get("signal_scope", base.signal_scope), "slurm.signal_scope",
                             SIGNAL_SCOPES),
        on_drain=check.choice(obj.get("on_drain", base.on_drain), "slurm.on_drain", SLURM_ON_DRAIN),
    )


def _parse_fallback(value: Any) -> Fallback:
    obj = check.json_object(value, "fallback")
    check.no_unknown(obj, frozenset(Fallback.__dataclass_fields__), "fallback")
    kinds = obj.get("kinds", list(BUILTIN.fallback.kinds))
    if (not isinstance(kinds, list) or not all(isinstance(k, str) and k in KINDS for k in kinds)
            or len(set(kinds)) != len(kinds)):
        raise check.fail("fallback.kinds", f"a list of distinct kinds from {', '.join(KINDS)}", kinds)
    lead = check.integer(obj.get("lead_s", BUILTIN.fallback.lead_s), "fallback.lead_s", 0, MAX_BUDGET_S)
    return Fallback(kinds=tuple(kinds), lead_s=lead)


def _parse_local_pods(value: Any) -> LocalPods:
    obj = check.json_object(value, "local_pods")
    check.no_unknown(obj, frozenset(LocalPods.__dataclass_fields__), "local_pods")
    return LocalPods(
        delete_emptydir_data=check.boolean(obj.get("delete_emptydir_data", False), "local_pods.delete_emptydir_data"),
        force=check.boolean(obj.get("force", False), "local_pods.force"))


# The conservative contract used when no signed one is available (first boot
# without user-data, a broken trust directory). Every value is the safe side:
BUILTIN = Contract(
    serial=0,  # below every signed serial (>= 0), and never blocks one: see contract_verify
    hall="*",  # matches no real hall: a builtin contract is never mistaken for a hall's
    node_class="*",
    issued_at=0.0,
    # 25 s: GCP and Azure give 30 s and the metadata poll runs every 5 s, so a
    # notice can be seen with 25 s left; a budget that fits there fits everywhere.
    # Checkpoint first (10 s), then evict (10 s), and keep 5 s for the verifier
    # to observe the outcome and for the API calls' own latency.
    drain=Drain(budget_s=25, checkpoint_s=10, evict_s=10, margin_s=5),
    taint_key="sco.io/notice",  # under the agent's own key prefix, which its admission policy allows
    # SIGTERM is what kubelet and Slurm preemption already send: every workload
    # that handles any signal handles this one. USR1 would kill an unprepared process.
    checkpoint_signal="SIGTERM",
    # A reclaim or a maintenance event takes the machine away: drain. A
    # rebalance recommendation is only elevated risk with no deadline: stop new
    # work landing (cordon) but leave running work alone.
    # A live migration or a pause of seconds leaves the VM and its work where they are: moving
    # the work would do more harm than the blackout.
    kinds=(("reclaim", "drain"), ("rebalance", "cordon"), ("maintenance", "drain"),
           ("live_migration", "ignore"), ("pause", "ignore")),
    # Deleting a PDB-blocked pod needs a delete permission the agent's RBAC does
    # not grant by default and overrides the owner's budget: only report it.
    pdb_blocked="report",
    # The exclude-from-load-balancers label is outside what the admission
    # policy lets the agent change unless the hall allows it.
    exclude_from_lb=False,
    # Like Slurm's own preemption (GraceTime): TERM to every process of the job,
    # so work running in a step sees it; then requeue, so no job is lost.
    slurm=SlurmPolicy(signal="SIGTERM", signal_scope="full", on_drain="requeue"),
    sink_url=None,  # None: ship events to the sink in the agent's own configuration
    # Going around the API server powers the machine off: only where it is going away anyway
    # (a reclaim), and only as late as leaves the kubelet its shutdownGracePeriod -- 10 s in
    # deploy/kubernetes/kubelet-graceful-shutdown.yaml (tests/deploy check they agree).
    fallback=Fallback(kinds=("reclaim",), lead_s=10),
    # A reclaim's deadline is minutes away at most and its deadline is the machine's end: drain at
    # once. A maintenance window may be announced days or weeks ahead (AWS's scheduled events):
    # draining when it is announced empties the node for nothing until then
    # (aws-node-termination-handler #903), so its drain starts budget_s before the window, the node
    # cordoned meanwhile. A hall that wants degraded hardware emptied at once (#361) says
    # "maintenance": "at_once"; a CI hall whose jobs should run to the reclaim's last moment
    # (runs-on #277) says "reclaim": "deadline_minus_budget".
    start=(("reclaim", AT_ONCE), ("rebalance", AT_ONCE), ("maintenance", DEADLINE_MINUS_BUDGET),
           ("live_migration", AT_ONCE), ("pause", AT_ONCE)),
    source="builtin",
)
