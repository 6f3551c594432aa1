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
server. So the drain follows the PDBs' status (``PdbView``: a list per namespace, then a watch,
or, where the server cuts the watch short, a consistent GET of each PDB it waits on,
``node_listing`` / ``pdb_poll``) and asks ``BudgetGate`` before each eviction:

- ``OPEN``: every PDB selecting the pod has room in this drain's view of it;
- ``FREE``: no PDB is consulted (the pod is Pending / Succeeded / Failed, or it is not Ready
  while its one PDB has ``currentHealthy >= desiredHealthy > 0``: eviction.go deletes those
  without decrementing), or nothing is known (no PDB, no status: the server decides);
- ``CLOSED``: some PDB has no room: do not send; the watch (or the next read) wakes the drain
  when it changes.

Room = the server's ``disruptionsAllowed`` less this drain's accepted evictions the status does
not yet account for (``took``). A status from before the eviction's write (a watch lagging the
server by tens of seconds under load, a read sent before it) still shows the room the eviction
took, so an accepted eviction stays counted until a status the drain saw has caught up with it --
not until a timer runs out:

- any version of the status the drain saw (watched or read) lists the pod in ``disruptedPods``
  (``PdbView.accounted``): eviction.go's own write does, and every later write either still lists
  it or, the pod terminating, counts it unhealthy (the controller drops a terminating pod from
  ``disruptedPods`` and never counts it healthy again), so versions after it account for it too;
- or the status came from a consistent read (a list, or a GET, without resourceVersion) sent after
  the eviction was accepted (``read_at``, the monotonic time it was sent; a watched version
  keeps its list's): it shows the eviction's write or what followed it (this covers a relist or
  a read that skipped the version listing the pod);
- or ``TAKEN_MAX_S`` passed on the monotonic clock since it was accepted: the bound for a PDB whose
  status never catches up (a stuck watch, reads that keep failing). It is the controller's own ``DeletionTimeout``
  (2 min), after which the server itself forgets an eviction it never saw carried out; past it the
  server's answer decides alone, as it always may -- a refusal still backs off.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from executor.kube.pod_view import apply_event

OPEN, FREE, CLOSED = "open", "free", "closed"
# pkg/controller/disruption DeletionTimeout: how long the server keeps an eviction in disruptedPods
# without seeing the pod terminate. A bound only: a read catching up confirms far sooner.
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
    read_at: float = float("-inf")            # monotonic time the consistent read behind it was sent


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def status_of(pdb: dict[str, Any], accounted: frozenset[str] = frozenset(),
              read_at: float = float("-inf")) -> BudgetStatus:
    # A field of the wrong shape reads as absent (no room known), never as an exception in the drain.
    md, st = _dict(pdb.get("metadata")), _dict(pdb.get("status"))
    generation = _int(md.get("generation")) or 1
    return BudgetStatus(allowed=_int(st.get("disruptionsAllowed")),
                        processed=_int(st.get("observedGeneration")) >= generation,
                        current_healthy=_int(st.get("currentHealthy")),
                        desired_healthy=_int(st.get("desiredHealthy")),
                        accounted=accounted | frozenset(_dict(st.get("disruptedPods"))),
                        read_at=read_at)


def pdb_key(pdb: dict[str, Any]) -> str:
    """"namespace/name" of a PDB as the server sent it (a field of the wrong shape reads as absent)."""
    md = _dict(pdb.get("metadata"))
    return f"{md.get('namespace')}/{md.get('name')}"


@dataclass(slots=True)
class PdbView:
    """One namespace's PDBs: listed once, then read one by one (``pdb_poll``) while the drain waits
    on them. Every version seen adds to ``accounted``; ``read_at`` keeps, per PDB, when the latest
    consistent read behind its status was sent (monotonic: the list's, or a later GET's)."""

    pdbs: dict[str, dict[str, Any]] = field(default_factory=dict)    # by "ns/name"
    accounted: dict[str, frozenset[str]] = field(default_factory=dict)
    read_at: dict[str, float] = field(default_factory=dict)

    _statuses: dict[str, BudgetStatus] | None = field(default=None, init=False, repr=False, compare=False)

    def reset(self, items: list[dict[str, Any]], listed_at: float) -> None:
        """The namespace's PDBs as a consistent list sent at ``listed_at`` shows them."""
        self._statuses = None
        self.pdbs = {pdb_key(p): p for p in items}
        self.accounted = {k: status_of(p).accounted for k, p in self.pdbs.items()}
        self.read_at = dict.fromkeys(self.pdbs, listed_at)

    def saw(self, pdb: dict[str, Any], read_at: float | None) -> None:
        """One PDB as a consistent GET sent at ``read_at`` returned it (None: a newer version a
        watch delivered, its read time that of the list it follows). An answer to a read sent
        before the one the view holds only adds what it accounts for."""
        self._statuses = None
        key = pdb_key(pdb)
        self.accounted[key] = status_of(pdb, self.accounted.get(key, frozenset())).accounted
        if read_at is None:
            self.pdbs[key] = pdb
            self.read_at.setdefault(key, float("-inf"))
        elif read_at >= self.read_at.get(key, float("-inf")):
            self.pdbs[key], self.read_at[key] = pdb, read_at

    def drop(self, key: str) -> None:
        """The PDB ("ns/name") is gone."""
        self._statuses = None
        self.pdbs.pop(key, None)
        self.accounted.pop(key, None)
        self.read_at.pop(key, None)

    def items(self) -> list[dict[str, Any]]:
        return list(self.pdbs.values())

    def statuses(self) -> dict[str, BudgetStatus]:
        """Each PDB's status as seen now (computed again only after a change: read every turn)."""
        if self._statuses is None:
            self._statuses = {k: status_of(p, self.accounted.get(k, frozenset()),
                                           self.read_at.get(k, float("-inf")))
                              for k, p in self.pdbs.items()}
        return self._statuses


@dataclass(slots=True)
class PdbWatchView:
    """One namespace's PDBs as a list + watch keeps them (the ``watch.View`` protocol), in a
    ``PdbView``: the list's statuses read at ``listed_at``, each event a newer version."""

    pdbs: PdbView = field(default_factory=PdbView)
    resource_version: str = ""
    listed_at: float = float("-inf")   # set by its watch (drain_io) before ``reset``: when the list was sent

    def reset(self, items: list[dict[str, Any]], resource_version: str) -> None:
        self.pdbs.reset(items, self.listed_at)
        self.resource_version = resource_version

    def apply(self, event: dict[str, Any]) -> str:
        return apply_event(self, event, lambda obj: self.pdbs.saw(obj, None),
                           lambda obj: self.pdbs.drop(pdb_key(obj)))


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict))


def _name(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _caught_up(seen: BudgetStatus | None, pod: str, accepted_at: float | None) -> bool:
    """Does this status, as read, account for the pod's accepted eviction?"""
    if seen is None:
        return False
    return pod in seen.accounted or (accepted_at is not None and seen.read_at > accepted_at)


class BudgetGate:
    """The drain's view of its PDBs' room: the statuses read plus its own unconfirmed evictions."""

    def __init__(self) -> None:
        self.statuses: dict[str, BudgetStatus] = {}
        # "ns/name" -> pod name -> accepted at (monotonic; None: no clock given, never lapses)
        self.taken: dict[str, dict[str, float | None]] = {}

    def update(self, statuses: dict[str, BudgetStatus] | None, now: float | None) -> None:
        """The statuses as read now (None: none known, e.g. reads failing: the server
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
        heard it): count it against its PDB until a status read has caught up with it."""
        if self._free(pdbs, pod):
            return
        name = _name(pod)
        for key in pdbs:
            st = self.statuses.get(key)
            if st is not None and name not in st.accounted:
                self.taken.setdefault(key, {})[name] = now
