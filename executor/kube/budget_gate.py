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
not yet account for (``took``). One is accounted for once any version of the status the watch
delivered listed the pod in ``disruptedPods`` (``PdbView.accounted``: the eviction's own write
does, and every later write either still lists it or counts it unhealthy). A local decrement
the watch never confirms (the watch relisted past that write) lapses after ``TAKEN_TTL_S``:
then the server's answer decides, as it always does -- a refusal still backs off as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from executor.kube.pod_view import apply_event

OPEN, FREE, CLOSED = "open", "free", "closed"
# Long: under load the watch lags the server by seconds, and a decrement that lapses while the watch
# still lags is an eviction the server refuses (measured at 200 nodes with 5 s: thousands of 429s).
# The watch skips a status version only when it relists, which is rare.
TAKEN_TTL_S = 30.0
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


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def status_of(pdb: dict[str, Any], accounted: frozenset[str] = frozenset()) -> BudgetStatus:
    # A field of the wrong shape reads as absent (no room known), never as an exception in the drain.
    md, st = _dict(pdb.get("metadata")), _dict(pdb.get("status"))
    generation = _int(md.get("generation")) or 1
    return BudgetStatus(allowed=_int(st.get("disruptionsAllowed")),
                        processed=_int(st.get("observedGeneration")) >= generation,
                        current_healthy=_int(st.get("currentHealthy")),
                        desired_healthy=_int(st.get("desiredHealthy")),
                        accounted=accounted | frozenset(_dict(st.get("disruptedPods"))))


def _key(pdb: dict[str, Any]) -> str:
    md = pdb.get("metadata") or {}
    return f"{md.get('namespace')}/{md.get('name')}"


@dataclass(slots=True)
class PdbView:
    """One namespace's PDBs as a list + watch keeps them (the ``ListWatcher`` view protocol)."""

    pdbs: dict[str, dict[str, Any]] = field(default_factory=dict)    # by "ns/name"
    accounted: dict[str, frozenset[str]] = field(default_factory=dict)
    resource_version: str = ""

    def reset(self, items: list[dict[str, Any]], resource_version: str) -> None:
        # A relist may skip status versions: what they recorded is lost (``TAKEN_TTL_S`` covers it).
        self.pdbs = {_key(p): p for p in items}
        self.accounted = {k: status_of(p).accounted for k, p in self.pdbs.items()}
        self.resource_version = resource_version

    def apply(self, event: dict[str, Any]) -> str:
        return apply_event(self, event, self._put, self._drop)

    def _put(self, obj: dict[str, Any]) -> None:
        key = _key(obj)
        self.pdbs[key] = obj
        self.accounted[key] = status_of(obj, self.accounted.get(key, frozenset())).accounted

    def _drop(self, obj: dict[str, Any]) -> None:
        self.pdbs.pop(_key(obj), None)
        self.accounted.pop(_key(obj), None)

    def items(self) -> list[dict[str, Any]]:
        return list(self.pdbs.values())

    def statuses(self) -> dict[str, BudgetStatus]:
        return {k: status_of(p, self.accounted.get(k, frozenset())) for k, p in self.pdbs.items()}


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict))


def _name(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


class BudgetGate:
    """The drain's view of its PDBs' room: the watched statuses plus its own unconfirmed evictions."""

    def __init__(self) -> None:
        self.statuses: dict[str, BudgetStatus] = {}
        self.taken: dict[str, dict[str, float]] = {}   # "ns/name" -> pod name -> accepted at

    def update(self, statuses: dict[str, BudgetStatus] | None, now: float) -> None:
        """The statuses as watched now (None: not watched, e.g. the watch is failing: the server
        decides alone); drops the evictions they account for and those past TAKEN_TTL_S."""
        self.statuses = dict(statuses or {})
        for key in list(self.taken):
            seen = self.statuses.get(key)
            kept = {pod: at for pod, at in self.taken[key].items()
                    if now - at < TAKEN_TTL_S and (seen is None or pod not in seen.accounted)}
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

    def took(self, pdbs: tuple[str, ...], pod: dict[str, Any], now: float) -> None:
        """The server accepted the pod's eviction: count it against its PDB until the status does."""
        if self._free(pdbs, pod):
            return
        name = _name(pod)
        for key in pdbs:
            st = self.statuses.get(key)
            if st is not None and name not in st.accounted:
                self.taken.setdefault(key, {})[name] = now
