"""What the drain's coordinator sees of the node each turn, and what that costs the API server.

- the pods: from the ``PodWatcher`` (a watch; no request per turn);
- the PodDisruptionBudgets of the namespaces of those pods only, paginated, read again when a
  namespace appears or after ``PDB_REFRESH_S`` (they are for planning; the server enforces them);
- "empty": the watch may lag the server by a moment, so a node the watch says is empty is
  confirmed by one consistent LIST, at most every ``CONFIRM_INTERVAL_S``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from executor.kube.api import KubeApi, KubeError, Throttled
from executor.kube.pod_view import namespaces_of
from executor.kube.pod_watcher import PodWatcher

PDB_REFRESH_S = 10.0
CONFIRM_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Sight:
    pods: list[dict[str, Any]] | None   # None: the first list is not in yet
    pdbs: list[dict[str, Any]] | None   # None: unreadable (the plan groups by owner instead)
    confirmed: bool                      # ``pods`` is a consistent read of this turn


class NodeListing:
    def __init__(self, api: KubeApi, make_api: Callable[[], KubeApi], on_change: Callable[[], None],
                 warn: Callable[[str, str], None]) -> None:
        self._api = api
        self._warn = warn
        self.watcher = PodWatcher(make_api, on_change)
        self._pdbs: list[dict[str, Any]] | None = None
        self._pdbs_at = float("-inf")
        self._pdb_namespaces = frozenset[str]()
        self._confirmed_at = float("-inf")

    def start(self) -> NodeListing:
        self.watcher.start()
        return self

    def stop(self) -> None:
        self.watcher.stop()

    def look(self, now: float) -> Sight:
        """Raises Unreachable / KubeError as a failed list would (the watcher's, or this turn's)."""
        pods = self.watcher.pods()
        if pods is None:
            return Sight(None, self._pdbs, False)
        namespaces = namespaces_of(pods)
        if now - self._pdbs_at >= PDB_REFRESH_S or not namespaces <= self._pdb_namespaces:
            self._pdbs, self._pdbs_at, self._pdb_namespaces = self._read_pdbs(namespaces), now, namespaces
        confirmed = False
        if not namespaces_of(pods, counting=True) and now - self._confirmed_at >= CONFIRM_INTERVAL_S:
            pods, self._confirmed_at, confirmed = self._api.list_pods(), now, True
        return Sight(pods, self._pdbs, confirmed)

    def _read_pdbs(self, namespaces: frozenset[str]) -> list[dict[str, Any]] | None:
        try:
            return self._api.list_pdbs(namespaces)
        except Throttled:
            raise
        except KubeError as e:
            # Typically 403: the identity may not read PDBs. Plan by owner instead (see drain_plan).
            self._warn("drain.pdbs_unreadable", str(e))
            return None
