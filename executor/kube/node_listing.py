"""What the drain's coordinator sees of the node each turn, and what that costs the API server.

- the pods: from a watch (``drain_io.Watch``; no request per turn);
- the PodDisruptionBudgets of the namespaces of those pods only: listed once per namespace,
  paginated, when the namespace first appears, then watched from that list's resourceVersion
  (one watch per namespace, all served by the drain's one thread), so the drain sees each
  budget's ``disruptionsAllowed`` change as it happens (``budget_gate``). Until the server cuts
  that watch short: kube-apiserver 1.20.2's watch cache indexes only pods (``cacher.go``), so
  ``dispatchEvent`` hands every PDB event of the cluster to every PDB watcher and closes one that
  cannot take it in time ("Forcing watcher close due to unresponsiveness"): with a watch per node
  a hall reclaim costs the server once per node per eviction, quadratic. A namespace whose watch
  the server ended early ``PDB_WATCH_CUT_MAX`` times is no longer watched: its PDBs the drain waits
  on are read by name instead, one consistent GET each, on ``pdb_poll``'s schedule (linear in the
  hall). A namespace whose PDBs cannot be listed (403) makes the plan group by owner, and is tried
  again after ``PDB_REFRESH_S``; a watch that is failing, or a PDB whose read fails, keeps its
  last PDBs for the plan, but its status is not used (the server alone decides);
- "empty": the watch may lag the server by a moment, so a node the watch says is empty is
  confirmed by one LIST served from the watch cache at the watch's version or later, at most
  every ``CONFIRM_INTERVAL_S``.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.clock import MonoTime
from executor.kube.api import KubeError, NotFound, Throttled, Unreachable
from executor.kube.budget_gate import BudgetStatus, PdbView, PdbWatchView, pdb_key
from executor.kube.drain_io import DrainIO
from executor.kube.drain_plan import must_leave_under
from executor.kube.pdb_poll import PdbPoll
from executor.kube.pod_view import PodView, namespaces_of
from executor.kube.watch import Watch

PDB_REFRESH_S = 10.0
PDB_WATCH_CUT_MAX = 1   # a namespace's PDB watch the server cut short this often: read by name instead
CONFIRM_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Sight:
    pods: list[dict[str, Any]] | None   # None: the first list is not in yet
    pdbs: list[dict[str, Any]] | None   # None: unreadable (the plan groups by owner instead)
    confirmed: bool                      # ``pods`` is a consistent read of this turn
    budgets: dict[str, BudgetStatus] | None = None   # the PDB statuses, watched or read (None: none known)


def pod_watch(node: str) -> Watch[PodView]:
    """The node's pods: listed from the watch cache (RV=0), then watched."""
    return Watch("pods", lambda api: api.list_pods_at("0"), lambda api, rv, timeout: api.pods_watch(rv, timeout),
                 lambda api: PodView(node))


def pdb_watch(namespace: str, listed: tuple[list[dict[str, Any]], str], listed_at: float) -> Watch[PdbWatchView]:
    """One namespace's PDBs, from the list the drain made (sent at ``listed_at``), then watched."""
    return Watch(f"pdbs-{namespace[:20]}", lambda api: api.list_pdbs_at(namespace),
                 lambda api, rv, timeout: api.pdbs_watch(namespace, rv, timeout),
                 lambda api: PdbWatchView(), initial=listed, initial_at=listed_at)


class NodeListing:
    def __init__(self, io: DrainIO, warn: Callable[[str, str], None],
                 must_leave: Callable[[list[dict[str, Any]]], bool] | None = None,
                 rand: Callable[[], float] = random.random) -> None:
        """``must_leave(pods)``: does anything the drain has to move remain (default: any pod that
        counts, ``common.pod_filters``)? A pod whose own policy is skip is not (drain_plan.must_leave).
        ``rand``: [0, 1), the PDB reads' jitter."""
        self._io = io
        self._api = io.api
        self._must_leave = must_leave or must_leave_under(None)
        self._warn = warn
        self.watcher = io.add(pod_watch(self._api.node))
        self.pdb_watchers: dict[str, Watch[PdbWatchView]] = {}   # by namespace, while watched
        self.pdb_views: dict[str, PdbView] = {}    # by namespace, once no longer watched: read by name
        self._last_pdbs: dict[str, list[dict[str, Any]]] = {}   # by namespace: a failing watch's last
        self.poll = PdbPoll(rand)
        self._unread: set[str] = set()             # "ns/name" whose last read failed: status not used
        self._unreadable: set[str] = set()
        self._unreadable_at = float("-inf")
        self._confirmed_at = float("-inf")

    def look(self, now: MonoTime, waited_on: frozenset[str] = frozenset()) -> Sight:
        """Raises Unreachable / KubeError as a failed list would (the watcher's, or this turn's).
        ``now`` is monotonic: the PDB reads and the empty-node confirmation are intervals.
        ``waited_on``: the PDBs ("ns/name") holding back a pod still to move (read again)."""
        pods: list[dict[str, Any]] | None = self.watcher.read(PodView.snapshot)
        if pods is None:
            return Sight(None, None, False)
        namespaces = namespaces_of(pods)
        todo = namespaces - self.pdb_watchers.keys() - self.pdb_views.keys() - self._unreadable
        if self._unreadable and now - self._unreadable_at >= PDB_REFRESH_S:
            todo |= self._unreadable & namespaces
        if todo:
            self._list_pdbs(todo, now)
        self._unwatch_cut_short()
        self._read_waited_on(waited_on, now)
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

    def _list_pdbs(self, namespaces: frozenset[str] | set[str], now: float) -> None:
        for ns in sorted(namespaces):
            try:
                listed_at = time.monotonic()   # the budget gate trusts a read sent after an eviction
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

    def _unwatch_cut_short(self) -> None:
        """A namespace whose PDB watch the server keeps cutting short is read by name from now on,
        from what its watch last saw."""
        for ns, w in list(self.pdb_watchers.items()):
            if w.cut_short < PDB_WATCH_CUT_MAX:
                continue
            self._io.drop(w)
            del self.pdb_watchers[ns]
            if w.view is not None:
                self.pdb_views[ns] = w.view.pdbs
            else:   # (a watch is added with its list: not expected) the list planned by, read since never
                self.pdb_views[ns] = PdbView()
                self.pdb_views[ns].reset(self._last_pdbs.get(ns, []), float("-inf"))
            self._warn("drain.pdb_watch_dropped",
                       f"the server ended the PDB watch of namespace {ns} early {w.cut_short} times "
                       f"(1.20's watch cache closes a watcher it cannot feed): its PDBs are read by name instead")

    def _read_waited_on(self, waited_on: frozenset[str], now: float) -> None:
        """GET each PDB waited on whose read is due. Unreachable and Throttled are the turn's
        failure (the runner waits); any other refusal leaves that PDB's status unused."""
        # Only PDBs no longer watched are read (a watched one's changes come by its watch; a due
        # read never made would keep the drain's next turn in the past).
        read_by_name = {k for k in waited_on if k.partition("/")[0] in self.pdb_views}
        for key in self.poll.due(read_by_name, now):
            ns, _, name = key.partition("/")
            view = self.pdb_views[ns]
            sent_at = time.monotonic()
            try:
                pdb = self._api.get_pdb(ns, name)
            except NotFound:
                view.drop(key)
                continue
            except (Throttled, Unreachable):
                raise
            except KubeError as e:
                self._unread_now(key, str(e), now)
                continue
            if pdb_key(pdb) != key:
                # A 200 whose body is not that PDB (not JSON, not an object, another object: a proxy's
                # page, a server's defect) is no status at all, and must not enter the view as a PDB.
                self._unread_now(key, f"the answer is not that PDB (it names {pdb_key(pdb)!r})", now)
                continue
            self._unread.discard(key)
            view.saw(pdb, sent_at)
            self.poll.read(key, str((pdb.get("metadata") or {}).get("resourceVersion") or ""), now)

    def _unread_now(self, key: str, why: str, now: float) -> None:
        """The read of ``key`` failed: its status is not used (the server decides) until one succeeds."""
        self._warn("drain.pdb_unread", f"{key}: {why}")
        self._unread.add(key)
        self.poll.read(key, None, now)

    def _pdb_sight(self, namespaces: frozenset[str],
                   ) -> tuple[list[dict[str, Any]] | None, dict[str, BudgetStatus] | None]:
        budgets: dict[str, BudgetStatus] = {}
        live = False
        for ns, w in self.pdb_watchers.items():
            try:
                seen = w.read(lambda v: (v.pdbs.items(), v.pdbs.statuses()))
            except (Unreachable, KubeError):
                continue   # its last PDBs still plan; its statuses are stale: not used
            if seen is not None:
                self._last_pdbs[ns], statuses = seen
                budgets.update(statuses)
                live = True
        for ns, view in self.pdb_views.items():
            self._last_pdbs[ns] = view.items()
            budgets.update((k, st) for k, st in view.statuses().items() if k not in self._unread)
            live = True
        if namespaces & self._unreadable:
            return None, None
        pdbs = [p for ns in sorted(namespaces) for p in self._last_pdbs.get(ns, [])]
        return pdbs, (budgets if live else None)
