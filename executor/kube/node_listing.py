"""What the drain's coordinator sees of the node each turn, and what that costs the API server.

- the pods: from a watch (``drain_io.Watch``; no request per turn);
- the PodDisruptionBudgets of the namespaces of those pods only: listed once per namespace,
  paginated, when the namespace first appears, then watched from that list's resourceVersion
  (one watch per namespace, all served by the drain's one thread: 410 means one relist, at most
  once a second), so the drain
  sees each budget's ``disruptionsAllowed`` change as it happens (``budget_gate``). A namespace
  whose PDBs cannot be read (403) makes the plan group by owner, and is tried again after
  ``PDB_REFRESH_S``; a watch that is failing keeps its last PDBs for the plan, but its statuses
  are not used (the server alone decides, as without a watch);
- "empty": the watch may lag the server by a moment, so a node the watch says is empty is
  confirmed by one consistent LIST, at most every ``CONFIRM_INTERVAL_S``.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.clock import MonoTime
from executor.kube.api import KubeError, Throttled, Unreachable
from executor.kube.budget_gate import BudgetStatus, PdbView
from executor.kube.drain_io import DrainIO
from executor.kube.drain_plan import must_leave_under
from executor.kube.pod_view import PodView, namespaces_of
from executor.kube.watch import Watch

PDB_REFRESH_S = 10.0
CONFIRM_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Sight:
    pods: list[dict[str, Any]] | None   # None: the first list is not in yet
    pdbs: list[dict[str, Any]] | None   # None: unreadable (the plan groups by owner instead)
    confirmed: bool                      # ``pods`` is a consistent read of this turn
    budgets: dict[str, BudgetStatus] | None = None   # the watched PDB statuses (None: none watched)


def pod_watch(node: str) -> Watch[PodView]:
    """The node's pods: listed from the watch cache (RV=0), then watched."""
    return Watch("pods", lambda api: api.list_pods_at("0"), lambda api, rv, timeout: api.pods_watch(rv, timeout),
                 lambda api: PodView(node))


def pdb_watch(namespace: str, listed: tuple[list[dict[str, Any]], str], listed_at: float) -> Watch[PdbView]:
    """One namespace's PDBs, from the list the drain made (sent at ``listed_at``), then watched."""
    return Watch(f"pdbs-{namespace[:20]}", lambda api: api.list_pdbs_at(namespace),
                 lambda api, rv, timeout: api.pdbs_watch(namespace, rv, timeout),
                 lambda api: PdbView(), initial=listed, initial_at=listed_at)


class NodeListing:
    def __init__(self, io: DrainIO, warn: Callable[[str, str], None],
                 must_leave: Callable[[list[dict[str, Any]]], bool] | None = None) -> None:
        """``must_leave(pods)``: does anything the drain has to move remain (default: any pod that
        counts, ``common.pod_filters``)? A pod whose own policy is skip is not (drain_plan.must_leave)."""
        self._io = io
        self._api = io.api
        self._must_leave = must_leave or must_leave_under(None)
        self._warn = warn
        self.watcher = io.add(pod_watch(self._api.node))
        self.pdb_watchers: dict[str, Watch[PdbView]] = {}
        self._last_pdbs: dict[str, list[dict[str, Any]]] = {}   # by namespace: a failing watch's last
        self._unreadable: set[str] = set()
        self._unreadable_at = float("-inf")
        self._confirmed_at = float("-inf")

    def look(self, now: MonoTime) -> Sight:
        """Raises Unreachable / KubeError as a failed list would (the watcher's, or this turn's).
        ``now`` is monotonic: the PDB re-read and the empty-node confirmation are intervals."""
        pods: list[dict[str, Any]] | None = self.watcher.read(PodView.snapshot)
        if pods is None:
            return Sight(None, None, False)
        namespaces = namespaces_of(pods)
        todo = namespaces - self.pdb_watchers.keys() - self._unreadable
        if self._unreadable and now - self._unreadable_at >= PDB_REFRESH_S:
            todo |= self._unreadable & namespaces
        if todo:
            self._read_pdbs(todo, now)
        pdbs, budgets = self._pdb_sight(namespaces)
        confirmed = False
        if not self._must_leave(pods) and now - self._confirmed_at >= CONFIRM_INTERVAL_S:
            # Confirmed by the server's watch cache as of the version this watch has reached or
            # later: it catches an event this watch missed or has not delivered yet. Not a quorum
            # read: on 1.20 that reads every pod of the cluster from etcd (a field selector is
            # applied after the read), once per node, when a hall's nodes empty together.
            seen = self.watcher.read(lambda v: v.resource_version) or ""
            pods = self._api.list_pods_at(seen, not_older_than=True)[0]
            self._confirmed_at, confirmed = now, True
        return Sight(pods, pdbs, confirmed, budgets)

    def _read_pdbs(self, namespaces: frozenset[str] | set[str], now: float) -> None:
        for ns in sorted(namespaces):
            try:
                listed_at = time.monotonic()   # the budget gate trusts a list sent after an eviction
                listed = self._api.list_pdbs_at(ns)
            except Throttled:
                raise
            except KubeError as e:
                # Typically 403: the identity may not read PDBs. Plan by owner instead (see drain_plan).
                self._warn("drain.pdbs_unreadable", str(e))
                self._unreadable.add(ns)
                self._unreadable_at = now
                continue
            self._unreadable.discard(ns)
            self._last_pdbs[ns] = listed[0]
            self.pdb_watchers[ns] = self._io.add(pdb_watch(ns, listed, listed_at))

    def _pdb_sight(self, namespaces: frozenset[str],
                   ) -> tuple[list[dict[str, Any]] | None, dict[str, BudgetStatus] | None]:
        budgets: dict[str, BudgetStatus] = {}
        live = False
        for ns, w in self.pdb_watchers.items():
            try:
                seen = w.read(lambda v: (v.items(), v.statuses()))
            except (Unreachable, KubeError):
                continue   # its last PDBs still plan; its statuses are stale: not used
            if seen is not None:
                self._last_pdbs[ns], statuses = seen
                budgets.update(statuses)
                live = True
        if namespaces & self._unreadable:
            return None, None
        pdbs = [p for ns in sorted(namespaces) for p in self._last_pdbs.get(ns, [])]
        return pdbs, (budgets if live else None)
