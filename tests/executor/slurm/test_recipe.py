"""The recipe's control flow against a scripted Slurm (no cluster): dry-run, errors, a DRAIN that lands late."""
from __future__ import annotations

import time
from typing import Any

import pytest

from common.notice import Notice
from executor.slurm.cli import NodeInfo, NotRequeueable, SlurmError, Unreachable
from executor.slurm.recipe import POLL_S, SlurmDrain, Tracked
from tests.executor.slurm.harness import Recorder, order, record
from tests.support.clocks import at


class Answer:
    def __init__(self, value: bool) -> None:
        self.value = value

    def result(self, now: float) -> bool:
        return self.value


class FakeSlurm:
    """The SlurmCli surface the recipe uses, with a node and jobs held in memory."""

    def __init__(self) -> None:
        self.node, self.conf = "n1", "/c"
        self.up = True
        self.drain_set, self.reason = False, ""
        self.running: list[int] = []
        self.calls: list[str] = []
        self.fail: dict[str, Exception] = {}
        self.drain_lands_on_timeout = False

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]

    def ping(self) -> bool:
        return self.up

    def start_ping(self, now: float) -> Answer:
        return Answer(self.up)

    def node_info(self, node: str) -> NodeInfo:
        self._call("node_info")
        return NodeInfo(node, frozenset({"MIXED", "DRAIN"} if self.drain_set else {"MIXED"}), self.reason)

    def node_state(self, node: str) -> str:
        return "drained" if self.drain_set and not self.running else "mixed"

    def jobs_on(self, node: str, states: str) -> list[int]:
        return list(self.running)

    def listpids(self) -> list[Any]:
        return []

    def drain(self, node: str, reason: str) -> None:
        if self.drain_lands_on_timeout:
            self.drain_set, self.reason = True, reason  # the controller applies it later...
        self._call("drain")                             # ...but the call itself times out
        self.drain_set, self.reason = True, reason

    def signal(self, node: str, job: int, sig: str, scope: str) -> None:
        self._call("signal")

    def requeue(self, node: str, job: int) -> bool:
        self._call("requeue")
        self.running.remove(job)
        return True

    def cancel(self, node: str, job: int) -> None:
        self._call("cancel")

    def resume(self, node: str) -> None:
        self._call("resume")


class Run:
    """The recipe stepped as the scheduler's worker steps it: one Tracked for the notice, handed the
    core's latest order (from the record the Recorder keeps) every round."""

    def __init__(self, fake: FakeSlurm, checkpoint_s: int = 30, dry_run: bool = False,
                 out: Recorder | None = None, n: Notice | None = None) -> None:
        now = time.time()
        self.n = n or Notice("n-1", "reclaim", "n1", "", now, now + 120, "sco", received_at=now)
        if out is None:
            out = Recorder()
            out.rec = record(self.n, checkpoint_s=checkpoint_s, evict_s=30)
        self.out = out
        self.drain = SlurmDrain(fake, out, dry_run=dry_run, scan=lambda conf, node: {})  # type: ignore[arg-type]
        self.tracked = Tracked.of(order(self.n, out.rec))

    def restarted(self, fake: FakeSlurm) -> Run:
        """A new executor on the record as it was last saved."""
        self.out.rec = self.out.saved
        return Run(fake, out=self.out, n=self.n)

    def rounds(self, k: int, start: float | None = None) -> float:
        """k rounds, each far enough apart to pass the recipe's own pacing."""
        t = start or time.time()
        for _ in range(k):
            self.tracked.order = order(self.n, self.out.rec)
            self.drain.step(self.tracked, at(t))
            t += 10.0
        return t


def test_dry_run_changes_nothing_and_says_what_it_would_do():
    fake = FakeSlurm()
    fake.running = [5]
    r = Run(fake, dry_run=True)
    out = r.out
    r.rounds(3)
    # One read, one plan, an end of its own kind: no second round, no write.
    assert fake.calls.count("node_info") == 1
    assert not {"drain", "signal", "requeue", "cancel", "resume"} & set(fake.calls)
    (plan,) = out.of("drain.plan")
    assert "n-1" in plan["drain"]["reason"] and plan["drain"]["node"] == "n1"
    assert [j["job"] for j in plan["jobs"]] == [5]
    assert [s["phase"] for s in plan["jobs"][0]["steps"]] == ["checkpoint", "requeue", "kill"]
    assert out.rec["state"] == "dry_run"


def test_dry_run_with_the_controller_down_says_what_it_would_do_and_ends():
    fake = FakeSlurm()
    fake.up = False
    r = Run(fake, dry_run=True)
    r.rounds(2)
    (plan,) = r.out.of("drain.plan")
    assert plan["jobs"] is None and "does not answer" in plan["unreadable"]
    (would,) = r.out.of("drain.dry_run")
    assert would["action"] == "fallback"
    assert r.out.rec["state"] == "dry_run" and not {"drain", "signal"} & set(fake.calls)


def test_a_drain_that_timed_out_but_landed_is_not_sent_again():
    """Timeout -> around the controller; when it answers, state says DRAIN is set: reconciled, no second DRAIN."""
    fake = FakeSlurm()
    fake.drain_lands_on_timeout = True
    fake.fail["drain"] = Unreachable(("scontrol",), -1, "no answer within 12 s")
    r = Run(fake)
    out = r.out
    t = r.rounds(1)
    assert out.types() == ["drain.error", "drain.fallback"]
    assert out.rec["remaining"] == ["slurmctld:unreachable"]
    r.rounds(2, start=t)
    assert fake.calls.count("drain") == 1
    assert out.of("drain.reconciled")[0]["drain_set"] is True
    assert out.types()[-1] == "drain.node_empty" and out.rec["state"] == "done"


def test_a_refusal_is_reported_once_and_retried():
    """A refused call (not a timeout) stays on the controller path: one drain.error, retried next round."""
    fake = FakeSlurm()
    fake.fail["drain"] = SlurmError(("scontrol",), 1, "Invalid node state specified")
    r = Run(fake)
    out = r.out
    r.rounds(3)
    assert out.types() == ["drain.error"] and fake.calls.count("drain") == 3
    del fake.fail["drain"]
    r.rounds(1, start=time.time() + 100)
    assert "drain.cordoned" in out.types() and "drain.fallback" not in out.types()


def test_checkpoint_signal_is_not_repeated_after_a_restart():
    """The record written before the signal survives the executor: a new recipe does not signal again."""
    fake = FakeSlurm()
    fake.running = [5, 6]
    r = Run(fake)
    out = r.out
    r.rounds(1)
    r.restarted(fake).rounds(2)
    assert fake.calls.count("signal") == 2
    assert out.of("drain.signalled")[0]["jobs"] == [5, 6]


def test_requeue_refused_is_remembered_across_rounds():
    fake = FakeSlurm()
    fake.running = [7]
    fake.fail["requeue"] = NotRequeueable(("scontrol",), 1, "Requested operation is presently disabled for job 7")
    r = Run(fake, checkpoint_s=0)
    out = r.out
    r.rounds(3)
    assert fake.calls.count("requeue") == 1
    assert out.rec["slurm"]["refused"] == {"7": "Requested operation is presently disabled for job 7"}
    assert out.rec["remaining"] == ["7"]


def test_a_refusal_that_lasts_is_said_again_per_window_with_its_count_and_the_rest_at_the_end():
    """The one recorder (common/recorder.py) instead of "the same text again is dropped":
    a controller refusing for minutes says so once per window, and the stop says what is left."""
    fake = FakeSlurm()
    fake.fail["drain"] = SlurmError(("scontrol",), 1, "Invalid node state specified")
    r = Run(fake)
    out = r.out
    t = r.rounds(7)                              # 70 s of refusals, one round every 10 s
    r.drain.tick(mono=t)
    assert [(d["count"], d["total"]) for d in out.of("drain.error")] == [(1, 1), (6, 7)]
    t = r.rounds(2, start=t)
    r.drain.tick(force=True, mono=t)
    assert [(d["count"], d["total"]) for d in out.of("drain.error")][-1] == (2, 9)
    assert all("Invalid node state" in d["error"] for d in out.of("drain.error"))


@pytest.mark.parametrize("step_s", [-60.0, 60.0])
def test_the_rounds_keep_their_pace_when_the_wall_clock_steps(step_s):
    """Issue 26 point 8: the recipe's pacing (POLL_S between rounds) is an interval, on the
    monotonic clock. A wall clock stepped 60 s back must not stall the drain for 60 s, and one
    stepped 60 s ahead must not fire rounds early; the phases still follow the wall clock."""
    fake = FakeSlurm()
    fake.running = [5]
    run = Run(fake)
    wall, mono = time.time(), 1000.0
    run.drain.step(run.tracked, at(wall, mono))
    first = len(fake.calls)
    assert first > 0
    run.tracked.order = order(run.n, run.out.rec)
    run.drain.step(run.tracked, at(wall + step_s, mono + POLL_S / 2))   # not due yet, whatever the wall says
    assert len(fake.calls) == first
    run.tracked.order = order(run.n, run.out.rec)
    run.drain.step(run.tracked, at(wall + step_s, mono + POLL_S + 0.01))   # due: a round, stepped or not
    assert len(fake.calls) > first
