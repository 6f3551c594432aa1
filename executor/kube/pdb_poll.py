"""When to read a PodDisruptionBudget the drain is waiting on, once its namespace is no longer
watched (pure: plain data, clock and random passed in, no I/O).

The drain lists its namespaces' PDBs and watches them (``node_listing``) -- until the server cuts
a watch short: kube-apiserver 1.20.2's watch cache has no index for PDBs (``cacher.go``: only pods
get a trigger, by ``spec.nodeName``), so ``dispatchEvent`` hands every PDB event in the cluster to
every PDB watcher, whatever its namespace, and closes a watcher that cannot take it in time
("Forcing watcher close due to unresponsiveness"). One watch per node makes every eviction in a
hall cost the server once per node: quadratic. bench.fleet measured it at 501 nodes: 21 PDB
watches opened per node (docs/kubernetes.md). From then on the drain reads again, one GET each,
only the PDBs that hold back a pod it still has to move (no room in its view).

A GET by name is one key, whatever the cluster's size. It is a consistent read (no
resourceVersion: etcd, through the cacher's ``Get``), so a status read after an eviction was
accepted shows that eviction's write or what followed it (``budget_gate``).

The schedule, per PDB waited on: first read ``POLL_MIN_S`` after it closes; each read that finds
the version it found last waits twice as long, up to ``POLL_MAX_S``; a read that finds a new
version (the status is moving: the disruption controller is at work on it) goes back to
``POLL_MIN_S``, and so does a pod under it leaving the node (seen on the pod watch, indexed and
cheap: a burst of departures, one read), which is when room comes back for a drain alone on its
PDBs. The cap is for room that comes back elsewhere (a replacement Ready, another node's pod
gone). Every wait is jittered (x0.5 to x1.5), so a hall's drains do not read in step. A hall of N
nodes each waiting on k PDBs costs at most N x k / ``POLL_MAX_S`` reads a second while nothing
moves, each one key. (Measured against a schedule that backs off on every read that finds no
room, new version or not, and keeps the wait across closings: it sent half the reads and got
fewer pods out by the deadline -- a read is cheap beside an eviction the drain sends late;
docs/kubernetes.md.)
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

POLL_MIN_S = 0.5
POLL_MAX_S = 5.0


class PdbPoll:
    def __init__(self, rand: Callable[[], float]) -> None:
        self._rand = rand                          # [0, 1): the jitter (passed in: deterministic under test)
        self.next_at: dict[str, float] = {}        # "ns/name" -> when to read it (MonoTime)
        self.interval: dict[str, float] = {}       # "ns/name" -> the wait after a read
        self.version: dict[str, str] = {}          # "ns/name" -> the resourceVersion last read

    def _jittered(self, wait: float) -> float:
        return wait * (0.5 + self._rand())

    def due(self, waited_on: Iterable[str], now: float) -> list[str]:
        """The PDBs to read now, of those ``waited_on`` ("ns/name"); forgets the others."""
        keys = set(waited_on)
        for key in list(self.next_at):
            if key not in keys:
                del self.next_at[key], self.interval[key]
        for key in keys - self.next_at.keys():
            self.interval[key] = POLL_MIN_S
            self.next_at[key] = now + self._jittered(POLL_MIN_S)
        return sorted(k for k, at in self.next_at.items() if at <= now)

    def read(self, key: str, version: str | None, now: float) -> None:
        """``key`` was read now: ``version`` its resourceVersion (None: the read failed). A new
        version: soon again; the same, or a failure: twice the last wait."""
        if key not in self.next_at:
            return
        changed = version is not None and version != self.version.get(key)
        if version is not None:
            self.version[key] = version
        self.interval[key] = wait = POLL_MIN_S if changed else min(POLL_MAX_S, 2 * self.interval[key])
        self.next_at[key] = now + self._jittered(wait)

    def next_moment(self) -> float:
        """When the next read is due (MonoTime; inf: none): the drain's next turn at the latest."""
        return min(self.next_at.values(), default=float("inf"))

    def poke(self, keys: Iterable[str], now: float) -> None:
        """Pods under ``keys`` left the node: room may be back. Those waited on are read within
        POLL_MIN_S (once, however many left together), and their waits start again from it."""
        for key in keys:
            if key in self.next_at:
                self.interval[key] = POLL_MIN_S
                self.next_at[key] = min(self.next_at[key], now + self._jittered(POLL_MIN_S))
