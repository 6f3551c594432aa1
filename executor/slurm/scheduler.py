"""The Slurm scheduler (``executor.scheduler.Scheduler``): the recipe on its own worker thread.

Slurm's tools block -- up to ``slurm.command_timeout_s`` (12 s) each while
slurmctld is slow, a ping up to 2 s -- so the recipe (``executor.slurm.recipe``)
never runs on the executor's loop: ``advance`` and ``withdraw`` only leave the
latest order for the worker, which runs a round of the node's one drain (the
governing notice's order: a new one takes the drain over) when it is due and
reports back through a ``ReportQueue``. The loop keeps serving the agent socket
and the spool whatever slurmctld does.

What the recipe writes down before it acts (``Out.remember``) makes the worker
wait until the loop has saved the record: the at-most-once signals stay at most
once across a SIGKILL.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from common.clock import moment
from common.supervise import Crash, Supervised
from executor.scheduler import Announce, Log, Order, Remember, Report, ReportQueue, Saved, Withdrawal
from executor.slurm.cli import SlurmCli
from executor.slurm.memo import memo_problem
from executor.slurm.recipe import SlurmDrain, Tracked

if TYPE_CHECKING:
    from common.config import Config
    from common.log import Logger

__all__ = ["SlurmScheduler", "build", "memo_problem"]

IDLE_WAIT_S = 0.1   # the worker's pause between rounds; the recipe paces each notice itself


class Stopped(Exception):
    """The executor is stopping: the worker leaves whatever it was doing."""


class SlurmScheduler:
    def __init__(self, make_recipe: Callable[[SlurmScheduler], SlurmDrain]) -> None:
        """``make_recipe(out)`` builds the recipe reporting to ``out`` (this scheduler)."""
        self._queue = ReportQueue()
        self.recipe: SlurmDrain = make_recipe(self)
        self._lock = threading.Lock()
        self._orders: dict[str, Order] = {}
        self._withdrawals: dict[str, Withdrawal] = {}
        # ids whose drain or withdrawal has finished; a cordon-only order's end is kept apart
        # (``_done_key``): a deferred drain's cordon ends, and the same notice's drain starts later.
        self._done: set[str] = set()
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._worker: Supervised | None = None

    # -- the Scheduler protocol, on the loop's thread -------------------------------------
    def advance(self, order: Order, now: float) -> None:
        """The node's one drain is ``order``'s: a notice that governed before is no longer worked for
        (it is served by this drain; the core keeps its record up to it)."""
        with self._lock:
            for nid in [k for k in self._orders if k != order.notice_id]:
                del self._orders[nid]
        self._hand_over(self._orders, order.notice_id, order, _done_key(order))

    def withdraw(self, w: Withdrawal, now: float) -> None:
        with self._lock:
            self._orders.pop(w.notice_id, None)
        self._hand_over(self._withdrawals, f"withdraw:{w.notice_id}", w)

    def reports(self) -> list[Report]:
        return self._queue.take()

    def fileno(self) -> int:
        return self._queue.fileno()

    def close(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._worker is not None:
            # A CLI call in flight ends within its timeout; the thread is a daemon either way.
            self._worker.stop()
            self._worker.join(1.0)
        self._queue.close()

    def _hand_over(self, table: dict[str, Any], key: str, item: Order | Withdrawal, done_key: str = "") -> None:
        with self._lock:
            if (done_key or key) in self._done:
                return
            new = key not in table
            table[key] = item
        if self._worker is None:
            # Supervised: an exception nobody foresaw restarts the worker after a growing pause (said
            # as agent.thread_restarted); it rebuilds what it tracks from the orders, as a restart does.
            self._worker = Supervised("slurm-drain", self._main, on_crash=self._crashed).start()
        if new:
            self._kick.set()

    # -- the recipe's Out, on the worker thread ---------------------------------------------
    def put(self, r: Report) -> None:
        if self._stop.is_set():
            raise Stopped()
        self._queue.put(r)

    def remember(self, notice_id: str, memo: dict[str, Any]) -> None:
        saved = Saved()
        self.put(Remember(notice_id, memo, saved))
        while not saved.wait(0.1):
            if self._stop.is_set():
                raise Stopped()   # not on disk: whatever it guarded is not done

    # -- the worker ---------------------------------------------------------------------------
    def _crashed(self, crash: Crash) -> None:
        self._queue.put(Announce("", "agent.thread_restarted", {
            "thread": crash.thread, "error": crash.error, "restarts": crash.restarts, "pause_s": crash.pause_s}))

    def _main(self, stopping: threading.Event) -> None:
        tracked: dict[str, Tracked] = {}
        try:
            while not self._stop.is_set():
                self._kick.clear()
                with self._lock:
                    orders, withdrawals = dict(self._orders), dict(self._withdrawals)
                for nid in [k for k in tracked if k not in orders]:
                    del tracked[nid]   # taken over: a later order for it starts from its record again
                for nid, order in orders.items():
                    t = tracked.get(nid)
                    if t is None:
                        t = tracked[nid] = Tracked.of(order)
                    t.order = order
                    self.recipe.step(t, moment())
                    if t.finished:
                        self._finished(self._orders, nid, _done_key(t.order))
                for key, w in withdrawals.items():
                    tracked.pop(w.notice_id, None)
                    if self.recipe.undo(w, moment()):
                        self._finished(self._withdrawals, key)
                self.recipe.tick()
                self._kick.wait(IDLE_WAIT_S)
        except Stopped:
            pass
        finally:
            self.recipe.tick(force=True)   # nothing counted goes unsaid
            if self.recipe.probe is not None:
                self.recipe.probe.close()
                self.recipe.probe = None   # a restarted worker starts its own

    def _finished(self, table: dict[str, Any], key: str, done_key: str = "") -> None:
        with self._lock:
            table.pop(key, None)
            self._done.add(done_key or key)


def _done_key(order: Order) -> str:
    """What a finished order is remembered as: a cordon-only one apart from the drain of its notice."""
    return f"cordon:{order.notice_id}" if order.cordon_only else order.notice_id


def build(config: Config, log: Logger) -> SlurmScheduler:
    """The recipe wired to the executor's config; every command that changes something is logged."""

    def make_recipe(out: SlurmScheduler) -> SlurmDrain:
        def audit(argv: tuple[str, ...]) -> None:   # on the worker: logged by the loop
            out.put(Log("", "slurm.command", {"argv": list(argv)}, level="info"))

        s = config.slurm
        cli = SlurmCli(config.node.name, s.conf, s.command_timeout_s, audit=audit)
        return SlurmDrain(cli, out, dry_run=config.executor.dry_run)

    return SlurmScheduler(make_recipe)
