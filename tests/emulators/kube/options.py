"""Emulator settings, declared once, validated at start and on every runtime change."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# "v2" is no real version: it stands for a future server whose discovery lists an Eviction
# version a client does not know yet (executor/kube/discovery.py), served like the others.
POLICY_VERSIONS = ("v2", "v1", "v1beta1")


@dataclass(frozen=True)
class Options:
    """How the emulated cluster behaves.

    ``policy_versions`` are the policy/* versions served, preferred first: ("v1",) is a modern
    server; ("v1beta1",) a 1.20 one (Eviction and PDB only as v1beta1); ("v2", "v1") a future
    one listing Eviction as policy/v2 and still taking policy/v1 bodies, ("v2",) one that does not.
    """

    policy_versions: tuple[str, ...] = ("v1",)  # () : no PDBs and no eviction (kubectl then DELETEs)
    server_version: str = "v1.37.0"
    # Simulated kubelet: starts pods bound to a node and finishes their graceful deletions.
    kubelet: bool = True
    # A terminating pod is removed after min(its grace period, grace_cap) seconds.
    grace_cap: float = 1.0
    # Seconds from a pod being bound to it running.
    start_delay: float = 0.0
    # Simulated ReplicaSet controller + scheduler: a deleted ReplicaSet-owned pod gets a
    # replacement, and unbound pods are bound to a schedulable node, as in a real cluster.
    replicasets: bool = True
    # Seconds from a volume no pod on its node mounts any more to its detach being done (the
    # provider's detach call): until then it stays in node.status.volumesAttached.
    detach_delay: float = 0.0
    # Period of the controller loop (kubelet, disruption controller, replicasets), seconds.
    tick: float = 0.05
    # Bearer token -> user name. Empty: any request is accepted (authenticated or not).
    tokens: dict[str, str] = field(default_factory=dict)
    # Watch events kept; a watch from an older resourceVersion gets 410 Gone.
    history: int = 20000
    # Resource (plural, e.g. "poddisruptionbudgets") -> seconds its watches lag the store: each
    # event reaches a watcher that long after it was written, in order, as from an API server
    # whose watch cache or send buffers trail etcd under load (the bench measured PDB watches
    # seconds behind at 300+ nodes). Lists are not delayed: a list without resourceVersion is a
    # consistent read (etcd, or since 1.31 the cache once it has caught up), so it is current.
    watch_lag: dict[str, float] = field(default_factory=dict)
    # Resource -> seconds after which the server ends every watch of it, whatever timeoutSeconds
    # the client asked: as 1.20.2's watch cache closes a watcher it cannot feed in time
    # (cacher.go, cacheWatcher.add: "Forcing watcher close due to unresponsiveness").
    watch_cut: dict[str, float] = field(default_factory=dict)
    # API Priority and Fairness for every non-watch API request (``apf``): 0 seats is off; else
    # that many execute at once, each for apf_service_s at least, apf_queue more wait (up to 15 s,
    # 1.20's queue wait limit), and any more is rejected with 1.20's APF 429.
    apf_seats: int = 0
    apf_queue: int = 0
    apf_service_s: float = 0.0

    def __post_init__(self) -> None:
        bad = [v for v in self.policy_versions if v not in POLICY_VERSIONS]
        if bad or len(set(self.policy_versions)) != len(self.policy_versions):
            raise ValueError(f"policy_versions must be drawn from {POLICY_VERSIONS}: {self.policy_versions}")
        for name in ("apf_seats", "apf_queue"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0")
        for name in ("grace_cap", "start_delay", "apf_service_s", "detach_delay"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.tick <= 0 or self.history < 10:
            raise ValueError("tick must be > 0 and history >= 10")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.tokens.items()):
            raise ValueError("tokens must map strings to strings")
        if not all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                   for k, v in self.watch_lag.items()):
            raise ValueError("watch_lag must map resource names to seconds >= 0")
        if not all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                   for k, v in self.watch_cut.items()):
            raise ValueError("watch_cut must map resource names to seconds > 0")


# Settings a running emulator accepts through POST /_emu/options.
RUNTIME_SETTINGS = ("kubelet", "grace_cap", "start_delay", "replicasets", "tokens", "watch_lag", "watch_cut",
                    "apf_seats", "apf_queue", "apf_service_s", "detach_delay")


def with_changes(options: Options, changes: dict[str, Any]) -> Options:
    """A validated copy with ``changes``; unknown or non-runtime keys are a ValueError."""
    unknown = set(changes) - set(RUNTIME_SETTINGS)
    if unknown:
        raise ValueError(f"not runtime settings: {sorted(unknown)}; allowed: {list(RUNTIME_SETTINGS)}")
    typed: dict[str, Any] = {}
    for key, value in changes.items():
        if key in ("kubelet", "replicasets"):
            if not isinstance(value, bool):
                raise ValueError(f"{key} must be a boolean")
            typed[key] = value
        elif key in ("apf_seats", "apf_queue"):
            typed[key] = value   # checked by __post_init__
        elif key in ("grace_cap", "start_delay", "apf_service_s", "detach_delay"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{key} must be a number")
            typed[key] = float(value)
        else:
            if not isinstance(value, dict):
                raise ValueError(f"{key} must be an object")
            typed[key] = dict(value)
    return dataclasses.replace(options, **typed)


def as_json(options: Options) -> dict[str, Any]:
    out = dataclasses.asdict(options)
    out["policy_versions"] = list(options.policy_versions)
    return out
