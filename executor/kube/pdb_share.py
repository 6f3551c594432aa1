"""One PDB's room shared with drains on other nodes, and when to ask about a budget a watch may
misreport (pure: plain data, clock and random passed in, no I/O). The eviction book keeps one.

A PDB's pods often sit on many nodes, and in a hall reclaim every one of those nodes' agents
reads the same status and sees the same room ``r``. Each sending whenever it sees room would
send N for r; the server refuses N - r, and a refusal costs it about what an accepted eviction
does (eviction.go reads the PDB and answers 429 inside its conflict-retried update,
``EvictionsRetry``). ``kubectl drain`` does exactly that and sleeps a fixed 5 s after each 429.
There is no coordinator here: each drain counts the PDB refusals it met per PDB since its last
accepted eviction under it (``c``, at most ``CONTENTION_MAX``) and then sends with probability
``r / 2**c`` -- binary exponential backoff, as Ethernet's, on the chance as well as on the time --
else its lane waits a jittered refusal backoff drawn by its own random source, or until the
room read grows (the book wakes it). A drain alone on its PDBs meets no refusal (the budget
gate keeps it inside the room) and is never slowed.

Past the evict cutoff a budget without room is asked anyway (one eviction) once its status has
stood still ``PROBE_QUIET_S``, and then once per that period: a watch can go silent without
failing (the drain cuts one only after ``watch.WATCH_QUIET_S``, minutes), and the server
decides. A status that moves comes from a live watch, or from reads that answer (a PDB read by
name, ``pdb_poll``, is read at least every ``POLL_MAX_S`` while waited on, each read a new
``BudgetStatus``), and the server would answer what it shows.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from executor.kube import pacing
from executor.kube.budget_gate import BudgetStatus

CONTENTION_MAX = 6     # refusals counted per PDB: a share of room / 64 at the least
PROBE_QUIET_S = 10.0


class PdbShare:
    def __init__(self, rand: Callable[[], float]) -> None:
        self.rand = rand   # [0, 1): the draws and the jitter (passed in: deterministic under test)
        self.contention: dict[str, int] = {}                     # "ns/name" -> refusals met
        self.deferred: dict[str, float] = {}                     # lane -> not before (MonoTime)
        self.moved: dict[str, tuple[BudgetStatus, float]] = {}   # "ns/name" -> its status, since (MonoTime)

    def saw(self, statuses: dict[str, BudgetStatus], now: float) -> None:
        """The PDBs' statuses as read now: which of them moved."""
        for key, status in statuses.items():
            seen = self.moved.get(key)
            if seen is None or seen[0] != status:
                self.moved[key] = (status, now)

    def answered(self, outcome: str, op: str, pdbs: Iterable[str]) -> None:
        """A PDB refusal counts one more drain met for the PDB's room; an accepted eviction one fewer."""
        for key in pdbs:
            if outcome == "blocked":
                self.contention[key] = min(CONTENTION_MAX, self.contention.get(key, 0) + 1)
            elif outcome == "accepted" and op != "delete" and self.contention.get(key, 0) > 0:
                self.contention[key] -= 1

    def waiting(self, lane: str, now: float) -> bool:
        return self.deferred.get(lane, 0.0) > now

    def wake(self, lanes: Iterable[str], at: float) -> None:
        for lane in lanes:
            if self.deferred.get(lane, 0.0) > at:
                self.deferred[lane] = at

    def send(self, lane: str, pdbs: tuple[str, ...], room: int | None, now: float) -> bool:
        """May the lane send now, with ``room`` the least room the status read shows (None:
        unknown)? If not, it waits a jittered refusal backoff (``waiting``)."""
        c = max((self.contention.get(k, 0) for k in pdbs), default=0)
        if c == 0 or self.rand() < min(1.0, (1 if room is None else room) / 2.0 ** c):
            return True
        self.deferred[lane] = now + pacing.refused_delay(c, None, self.rand)
        return False

    def quiet(self, pdbs: tuple[str, ...], now: float) -> bool:
        """Has the status read of these PDBs stood still PROBE_QUIET_S? If so it is asked, and
        the wait starts again (one probe a PROBE_QUIET_S at most)."""
        keys = [k for k in pdbs if k in self.moved]
        if any(now - self.moved[k][1] < PROBE_QUIET_S for k in keys):
            return False
        for k in keys:
            self.moved[k] = (self.moved[k][0], now)
        return True

    def tick(self, now: float) -> None:
        self.deferred = {lane: t for lane, t in self.deferred.items() if t > now}

    def moments(self) -> list[float]:
        """When time alone may change a verdict: a lane's wait ends, a status has stood still long enough."""
        return [*self.deferred.values(), *(since + PROBE_QUIET_S for _, since in self.moved.values())]
