"""Issue 26 point 7 on Slurm: the scheduler's one worker thread never dies silently. An exception
nobody foresaw (a bug, an answer of a shape nobody expected) restarts it after a pause, it says so
(``agent.thread_restarted``), and the drain goes on -- before, the thread ended and every later
notice on the node was never drained."""
from __future__ import annotations

import threading
from typing import Any

from executor.scheduler import Announce, Report
from executor.slurm.scheduler import SlurmScheduler
from tests.executor.kube.test_many_notices_kube import order
from tests.support.wait import wait_for


class FlakyRecipe:
    """The recipe's surface the worker calls; its first round raises."""

    probe = None

    def __init__(self) -> None:
        self.rounds = 0
        self.drained = threading.Event()

    def step(self, t: Any, at: Any) -> None:
        self.rounds += 1
        if self.rounds == 1:
            raise RuntimeError("a bug nobody foresaw")
        self.drained.set()

    def undo(self, w: Any, at: Any) -> bool:
        return True

    def tick(self, force: bool = False, mono: float | None = None) -> None:
        pass


def test_a_worker_that_raises_is_restarted_says_so_and_the_drain_goes_on():
    recipe = FlakyRecipe()
    sched = SlurmScheduler(lambda out: recipe)  # type: ignore[arg-type,return-value]
    seen: list[Report] = []
    try:
        sched.advance(order("n1", "reclaim", 120), 0.0)
        wait_for(recipe.drained.is_set, 10, "the drain's next round after the restart")
        wait_for(lambda: seen.extend(sched.reports()) or any(isinstance(r, Announce) for r in seen), 5,
                 "the restart said")
    finally:
        sched.close()
    (said,) = [r for r in seen if isinstance(r, Announce)]
    assert said.notice_id == "" and said.event == "agent.thread_restarted"
    assert said.data["thread"] == "slurm-drain" and said.data["restarts"] == 1
    assert "a bug nobody foresaw" in said.data["error"]
