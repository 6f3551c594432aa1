"""What a chaos drain will suffer, decided up front from a seeded RNG (pure: no I/O, no clock).

A ``DrainPlan`` is the drain's shape (how many pods, their grace, which
channel brings the notice) and its ``Fault`` list: what breaks, when (seconds
after the notice is published) and for how long. The harness only carries
plans out, so a seed names a run exactly, and a failing plan can be replayed.

Which verdict is legitimate is decided here too, from the plan alone: a drain
is expected ``done`` unless a fault makes ``overrun`` legitimate -- the API
server unreachable across the cutoff (``api_down_long``), the only fault that
keeps the agent from emptying the node in time whatever it does. Every other
fault is bounded well inside the window (it ends by ``FAULT_END_S``, the
cutoff is ``cutoff_s``), so an overrun after one of them is a violation.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

# SIGKILL of one program, found by `supervisorctl status`; supervisord restarts it.
KILLS = ("kill_spool", "kill_watcher", "kill_executor", "kill_verifier")
KUBE_KINDS = (
    *KILLS,
    "kill_supervisord",    # supervisord crashes; the harness plays systemd restarting the unit (inject.py)
    "unit_restart",        # `systemctl restart`: the whole unit stopped, its runtime dir removed, started
    "nats_restart",        # nats-server stopped, started again on the same port
    "metadata_error",      # the metadata service answers 500
    "metadata_hang",       # ... or holds every request past the agent's timeout
    "api_500", "api_429",  # the API server answers 500 / 429 to every request
    "api_timeout",         # ... holds every request past the agent's timeout, then drops it (nothing done)
    "api_slow",            # ... answers every request after the agent's timeout (done, but unheard of)
    "api_down",            # ... stops listening (connection refused)
    "vector_down",         # Vector refuses connections
    "vector_slow",         # Vector delivers, but answers each batch late
    "kafka_400",           # Vector up, Kafka not: each batch held (the sink's timeout), then 400 Rejected
    "kafka_500",           # ... or answered at once 500 Errored (tests/emulators/vector.py, kafka_down)
    "disk_full",           # the spool's filesystem (the state dir, a tmpfs) filled to the last byte
)
LONG_OUTAGE = "api_down_long"   # API server down from early on until past the cutoff
SLURM_KINDS = (*KILLS, "slurmctld_restart")

RESTARTS = ("kill_supervisord", "unit_restart")   # the unit restarted, runtime dir removed
# What each kind breaks: two faults on one target never overlap (reverting one must not end the other).
TARGET = {**dict.fromkeys(KILLS + RESTARTS, "process"), "nats_restart": "nats",
          "metadata_error": "metadata", "metadata_hang": "metadata", "api_500": "kube", "api_429": "kube",
          "api_timeout": "kube", "api_slow": "kube", "api_down": "kube", LONG_OUTAGE: "kube", "vector_down": "vector",
          "vector_slow": "vector", "kafka_400": "vector", "kafka_500": "vector", "disk_full": "disk",
          "slurmctld_restart": "slurmctld"}
# A restart of the unit never overlaps a full state dir: what was saved meanwhile went to the fallback
# copy in the runtime dir, which the restart removes -- two storage losses at once, by design not
# survived (docs/reliability.md, "Unit restarts").
ALSO_OCCUPIES = dict.fromkeys(RESTARTS, ("disk",))
INSTANT = frozenset(KILLS)   # nothing to revert
RELAY_LOSERS = frozenset({"kill_watcher", *RESTARTS, "nats_restart"})
RELAY_SETTLE_S = 1.5         # by then the watcher has taken (and persisted) a relay notice

FAULT_START_S = (0.0, 8.0)   # a fault starts this many seconds after the notice is published
FAULT_LENGTH_S = (0.5, 5.0)
FAULT_END_S = FAULT_START_S[1] + FAULT_LENGTH_S[1] + 2.0   # every bounded fault is over by then
LONG_OUTAGE_PAST_CUTOFF_S = 3.0


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    at: float          # seconds after the notice was published
    duration: float    # until it is reverted (0 for an instant fault)

    @property
    def end(self) -> float:
        return self.at + self.duration

    @property
    def target(self) -> str:
        return TARGET[self.kind]


@dataclass(frozen=True, slots=True)
class Timing:
    """The drain's window (seconds after publishing) and the contract it runs under."""

    deadline_s: float = 24.0
    checkpoint_s: int = 2
    evict_s: int = 10
    margin_s: int = 4

    @property
    def cutoff_s(self) -> float:
        return self.deadline_s - self.margin_s

    def contract(self) -> dict[str, int]:
        return {"budget_s": self.checkpoint_s + self.evict_s + self.margin_s, "checkpoint_s": self.checkpoint_s,
                "evict_s": self.evict_s, "margin_s": self.margin_s}


@dataclass(frozen=True, slots=True)
class DrainPlan:
    index: int
    faults: tuple[Fault, ...]
    pods: int = 3                  # pods on the draining node (Kubernetes) / unused on Slurm
    grace_s: int = 0               # their terminationGracePeriodSeconds
    channel: str = "both"          # relay | metadata | both: where the notice is published
    job: str = "checkpoint"        # Slurm: checkpoint (exits on USR1) | keep_running (requeued at the cutoff)
    timing: Timing = field(default_factory=Timing)

    def overrun_allowed(self) -> bool:
        """Only an API outage that spans the cutoff makes an overrun legitimate (module docstring)."""
        return any(f.kind == LONG_OUTAGE and f.end >= self.timing.cutoff_s for f in self.faults)

    @property
    def last_revert_s(self) -> float:
        return max((f.end for f in self.faults), default=0.0)


def long_outage(at: float, timing: Timing) -> Fault:
    return Fault(LONG_OUTAGE, at, timing.cutoff_s + LONG_OUTAGE_PAST_CUTOFF_S - at)


def draw_fault(rng: random.Random, kinds: tuple[str, ...]) -> Fault:
    kind = rng.choice(kinds)
    # Skewed early: most drains empty the node within seconds, and a fault should meet the drain.
    lo, hi = FAULT_START_S
    at = round(lo + (hi - lo) * rng.random() ** 2, 2)
    duration = 0.0 if kind in INSTANT else round(rng.uniform(*FAULT_LENGTH_S), 2)
    return Fault(kind, at, duration)


def spread(faults: list[Fault], end_s: float = FAULT_END_S) -> tuple[Fault, ...]:
    """Order by start; a fault whose target is still broken by an earlier one starts after it ends,
    or is left out if that would take it past ``end_s`` (the long outage is exempt).

    Process kills are instant, but supervisord's restart of the whole agent counts as the
    'process' target being busy, so a kill never lands while the harness restarts supervisord.
    """
    out: list[Fault] = []
    busy_until: dict[str, float] = {}
    for planned in sorted(faults, key=lambda f: (f.at, f.kind)):
        targets = (planned.target, *ALSO_OCCUPIES.get(planned.kind, ()))
        start = max([planned.at] + [busy_until.get(t, float("-inf")) + 0.5 for t in targets])
        f = replace(planned, at=round(start, 2))
        if f.kind != LONG_OUTAGE and f.end > end_s:
            continue
        for t in targets:
            busy_until[t] = f.end
        out.append(f)
    return tuple(out)


def plan_kube_drain(rng: random.Random, index: int, timing: Timing = Timing(),
                    long_outage_share: float = 0.06) -> DrainPlan:
    """One Kubernetes drain: 1-3 random faults; now and then an API outage past the cutoff."""
    faults = [draw_fault(rng, KUBE_KINDS) for _ in range(rng.choice((1, 1, 2, 2, 3)))]
    if rng.random() < long_outage_share:
        faults = [f for f in faults if f.target != "kube"] + [long_outage(round(rng.uniform(0.0, 3.0), 2), timing)]
    faults = spread(faults)
    return DrainPlan(index, faults, pods=rng.randint(2, 6), grace_s=rng.choice((0, 1, 2, 3, 4)),
                     channel=channel(rng, faults), timing=timing)


def channel(rng: random.Random, faults: tuple[Fault, ...]) -> str:
    """Where the notice is published. NATS core keeps nothing for a subscriber that is not there:
    a relay-only notice published as the watcher (or nats-server) goes down is lost, and the
    metadata poll is what covers that in production -- so such a drain gets both channels."""
    pick = rng.choice(("relay", "metadata", "both", "both"))
    if pick == "relay" and any(f.kind in RELAY_LOSERS and f.at < RELAY_SETTLE_S for f in faults):
        return "both"
    return pick


def plan_slurm_drain(rng: random.Random, index: int, timing: Timing) -> DrainPlan:
    """One Slurm drain: 1-2 faults, a SIGKILL of the executor or a slurmctld stop/start most of the time."""
    kinds = ("kill_executor", "kill_executor", "slurmctld_restart", "slurmctld_restart", *KILLS)
    faults = spread([draw_fault(rng, kinds) for _ in range(rng.choice((1, 2)))])
    return DrainPlan(index, faults, channel=channel(rng, faults), job=rng.choice(("checkpoint", "keep_running")),
                     timing=timing)


def plan_run(seed: int, drains: int, timing: Timing = Timing()) -> list[DrainPlan]:
    rng = random.Random(seed)
    return [plan_kube_drain(rng, i, timing) for i in range(drains)]


def plan_slurm_run(seed: int, drains: int, timing: Timing) -> list[DrainPlan]:
    rng = random.Random(seed)
    return [plan_slurm_drain(rng, i, timing) for i in range(drains)]
