"""Evict only what the PodDisruptionBudgets allow now (pure: plain data, clock passed in, no I/O).

The server decides every eviction (pkg/registry/core/pod/storage/eviction.go, ``checkAndDecrement``):
it refuses with 429 (cause DisruptionBudget) while ``status.disruptionsAllowed`` is 0 or the
status lags the spec (``observedGeneration < generation``: "still being processed"), and
otherwise decrements ``disruptionsAllowed`` and records the pod in ``status.disruptedPods`` --
in the same status write, before it deletes the pod and answers. The disruption controller
(pkg/controller/disruption, ``trySync`` / ``buildDisruptedPodMap`` / ``countHealthyPods``) then
rewrites the status from the pods it sees: a pod that is terminating is dropped from
``disruptedPods`` and no longer counts as healthy, so ``disruptionsAllowed`` rises again only once
a replacement is Ready elsewhere (or, with no controller scale, the pod is gone).

A refusal is a wasted request, and under a hall reclaim every agent's refusals land on one
server. So the drain watches the PDBs' status (``PdbView``, fed by a list + watch per namespace)
and asks ``BudgetGate`` before each eviction:

- ``OPEN``: every PDB selecting the pod has room in this drain's view of it;
- ``FREE``: no PDB is consulted (the pod is Pending / Succeeded / Failed, or it is not Ready
  while its one PDB has ``currentHealthy >= desiredHealthy > 0``: eviction.go deletes those
  without decrementing), or nothing is known (no PDB, no status: the server decides);
- ``CLOSED``: some PDB has no room: do not send; the watch wakes the drain when it changes.

Room = the server's ``disruptionsAllowed`` less this drain's accepted evictions the status does
not yet account for (``took``). The watch may lag the server by tens of seconds under load, and a
lagging status still shows the room the eviction took, so an accepted eviction stays counted until
the watched status has caught up with it -- not until a timer runs out:

- any version of the status the watch delivered lists the pod in ``disruptedPods``
  (``PdbView.accounted``): eviction.go's own write does, and every later write either still lists
  it or, the pod terminating, counts it unhealthy (the controller drops a terminating pod from
  ``disruptedPods`` and never counts it healthy again), so versions after it account for it too;
- or the view was filled by a list sent after the eviction was accepted (``listed_at``, the
  monotonic time the list was sent): the list is a consistent read, so it shows the eviction's
  write or what followed it (this covers a relist that skipped the version listing the pod);
- or ``TAKEN_MAX_S`` passed on the monotonic clock since it was accepted: the bound for a PDB whose
  watched status never moves (a stuck watch). It is the controller's own ``DeletionTimeout`` (2
  min), after which the server itself forgets an eviction it never saw carried out; past it the
  server's answer decides alone, as it always may -- a refusal still backs off.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from executor.kube.pod_view import apply_event

OPEN, FREE, CLOSED = "open", "free", "closed"
# pkg/controller/disruption DeletionTimeout: how long the server keeps an eviction in disruptedPods
# without seeing the pod terminate. A bound only: the watch catching up confirms far sooner.
TAKEN_MAX_S = 120.0
_IGNORE_PDB_PHASES = ("Pending", "Succeeded", "Failed")   # eviction.go: canIgnorePDB


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    allowed: int              # status.disruptionsAllowed
    processed: bool           # status.observedGeneration >= metadata.generation
    current_healthy: int
    desired_healthy: int
    accounted: frozenset[str] = frozenset()   # pods any seen version listed in disruptedPods
    listed_at: float = float("-inf")          # monotonic time the list behind this view was sent


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def status_of(pdb: dict[str, Any], accounted: frozenset[str] = frozenset(),
              listed_at: float = float("-inf")) -> BudgetStatus:
    # A field of the wrong shape reads as absent (no room known), never as an exception in the drain.
    md, st = _dict(pdb.get("metadata")), _dict(pdb.get("status"))
    generation = _int(md.get("generation")) or 1
    return BudgetStatus(allowed=_int(st.get("disruptionsAllowed")),
                        processed=_int(st.get("observedGeneration")) >= generation,
                        current_healthy=_int(st.get("currentHealthy")),
                        desired_healthy=_int(st.get("desiredHealthy")),
                        accounted=accounted | frozenset(_dict(st.get("disruptedPods"))),
                        listed_at=listed_at)


def _key(pdb: dict[str, Any]) -> str:
    md = pdb.get("metadata") or {}
    return f"{md.get('namespace')}/{md.get('name')}"


@dataclass(slots=True)
class PdbView:
    """One namespace's PDBs as a list + watch keeps them (the ``watch.View`` protocol)."""

    pdbs: dict[str, dict[str, Any]] = field(default_factory=dict)    # by "ns/name"
    accounted: dict[str, frozenset[str]] = field(default_factory=dict)
    resource_version: str = ""
    listed_at: float = float("-inf")   # set by its watch (drain_io): when the list behind it was sent

    _statuses: dict[str, BudgetStatus] | None = field(default=None, init=False, repr=False, compare=False)

    def reset(self, items: list[dict[str, Any]], resource_version: str) -> None:
        # A relist may skip status versions; the list is newer than they are (``listed_at``).
        self._statuses = None
        self.pdbs = {_key(p): p for p in items}
        self.accounted = {k: status_of(p).accounted for k, p in self.pdbs.items()}
        self.resource_version = resource_version

    def apply(self, event: dict[str, Any]) -> str:
        return apply_event(self, event, self._put, self._drop)

    def _put(self, obj: dict[str, Any]) -> None:
        self._statuses = None
        key = _key(obj)
        self.pdbs[key] = obj
        self.accounted[key] = status_of(obj, self.accounted.get(key, frozenset())).accounted

    def _drop(self, obj: dict[str, Any]) -> None:
        self._statuses = None
        self.pdbs.pop(_key(obj), None)
        self.accounted.pop(_key(obj), None)

    def items(self) -> list[dict[str, Any]]:
        return list(self.pdbs.values())

    def statuses(self) -> dict[str, BudgetStatus]:
        """Each PDB's status as seen now (computed again only after a change: read every turn)."""
        if self._statuses is None or any(st.listed_at != self.listed_at for st in self._statuses.values()):
            self._statuses = {k: status_of(p, self.accounted.get(k, frozenset()), self.listed_at)
                              for k, p in self.pdbs.items()}
        return self._statuses


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict))


def _name(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _caught_up(seen: BudgetStatus | None, pod: str, accepted_at: float | None) -> bool:
    """Does this watched status account for the pod's accepted eviction?"""
    if seen is None:
        return False
    return pod in seen.accounted or (accepted_at is not None and seen.listed_at > accepted_at)


class BudgetGate:
    """The drain's view of its PDBs' room: the watched statuses plus its own unconfirmed evictions."""

    def __init__(self) -> None:
        self.statuses: dict[str, BudgetStatus] = {}
        # "ns/name" -> pod name -> accepted at (monotonic; None: no clock given, never lapses)
        self.taken: dict[str, dict[str, float | None]] = {}

    def update(self, statuses: dict[str, BudgetStatus] | None, now: float | None) -> None:
        """The statuses as watched now (None: not watched, e.g. the watch is failing: the server
        decides alone); drops the evictions they have caught up with, and those accepted
        TAKEN_MAX_S ago or more (``now``: the monotonic clock; None: none lapses)."""
        self.statuses = dict(statuses or {})
        for key in list(self.taken):
            seen = self.statuses.get(key)
            kept = {pod: at for pod, at in self.taken[key].items()
                    if not _caught_up(seen, pod, at) and not (now is not None and at is not None
                                                              and now - at >= TAKEN_MAX_S)}
            if kept:
                self.taken[key] = kept
            else:
                del self.taken[key]

    def room(self, key: str) -> int | None:
        """disruptionsAllowed less this drain's unconfirmed evictions (None: status unknown)."""
        st = self.statuses.get(key)
        if st is None:
            return None
        if not st.processed:
            return 0
        return st.allowed - len(self.taken.get(key, {}))

    def _free(self, pdbs: tuple[str, ...], pod: dict[str, Any]) -> bool:
        """Does eviction.go delete this pod without consulting (and decrementing) a budget?"""
        if not pdbs or (pod.get("status") or {}).get("phase") in _IGNORE_PDB_PHASES:
            return True
        st = self.statuses.get(pdbs[0]) if len(pdbs) == 1 else None
        return st is not None and not _ready(pod) and st.current_healthy >= st.desired_healthy > 0

    def verdict(self, pdbs: tuple[str, ...], pod: dict[str, Any]) -> str:
        """May the pod, selected by ``pdbs``, be evicted now (OPEN / FREE / CLOSED)?"""
        if self._free(pdbs, pod):
            return FREE
        rooms = [self.room(k) for k in pdbs]
        if any(r is not None and r <= 0 for r in rooms):
            return CLOSED
        return OPEN if all(r is not None for r in rooms) else FREE

    def took(self, pdbs: tuple[str, ...], pod: dict[str, Any], now: float | None) -> None:
        """The server accepted the pod's eviction (``now``: the monotonic clock when the drain
        heard it): count it against its PDB until the watched status has caught up with it."""
        if self._free(pdbs, pod):
            return
        name = _name(pod)
        for key in pdbs:
            st = self.statuses.get(key)
            if st is not None and name not in st.accounted:
                self.taken.setdefault(key, {})[name] = now
