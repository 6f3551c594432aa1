"""The Kubernetes scheduler's loop side (executor/kube/scheduler.py), with a fake API."""
from __future__ import annotations

import copy
import itertools
import time
from typing import Any

from common.config import build
from common.supervise import pause_for
from executor.kube.api import Throttled, Unreachable
from executor.kube.node_patch import A_CORDONED_BY_AGENT, A_NOTICE
from executor.kube.scheduler import RESTART_AFTER_S, KubeScheduler, WithdrawRunner
from executor.scheduler import Announce, NewState, StepDone, Withdrawal
from tests.executor.kube.test_many_notices_kube import order
from tests.support.wait import wait_for

TAINT = {"key": "sco.io/notice", "value": "reclaim", "effect": "NoSchedule"}


class FakeApi:
    """Just enough of KubeApi for the node steps: one Node, patches recorded and applied."""

    node = "node-a"

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {"metadata": {"name": self.node, "resourceVersion": "1",
                                                 "annotations": {A_NOTICE: "n1", A_CORDONED_BY_AGENT: "true"}},
                                    "spec": {"unschedulable": True, "taints": [TAINT]}}
        self.patches: list[dict[str, Any]] = []

    def get_node(self) -> dict[str, Any]:
        return copy.deepcopy(self.doc)

    def patch_node(self, name: str, patch: dict[str, Any], content_type: str = "") -> dict[str, Any]:
        self.patches.append(patch)
        for key, value in (patch["metadata"].get("annotations") or {}).items():
            if value is None:
                self.doc["metadata"]["annotations"].pop(key, None)
        self.doc["spec"].update(patch["spec"])
        return self.get_node()

    def patch_node_taints(self, name: str, patch: dict[str, Any], content_type: str = "") -> dict[str, Any]:
        assert set(patch["spec"]) == {"taints"}   # the taint identity sends taints and nothing else
        return self.patch_node(name, patch, content_type)

    def close(self) -> None:
        pass


def test_a_withdrawal_that_succeeded_is_not_run_again_before_the_loop_reads_its_reports():
    """Found by the chaos run: the loop saw the withdrawal thread gone before it had applied its
    reports (state still "done"), started a second one, and drain.uncordoned was announced twice."""
    api = FakeApi()
    driver = KubeScheduler(build({"kubernetes": {"api_url": "http://127.0.0.1:1"}}), lambda: api)
    w = Withdrawal("n1", "sco.io/notice", frozenset({"cordoned"}))
    try:
        driver.withdraw(w, 0.0)
        wait_for(lambda: not driver.withdrawals["n1"].alive, 5, "the withdrawal done")
        driver.withdraw(w, 0.0)   # the loop's next turn, its reports not read yet
        wait_for(lambda: not driver.withdrawals["n1"].alive, 5, "no second withdrawal running")
        steps = [r.step for r in driver.reports() if isinstance(r, StepDone)]
    finally:
        driver.close()
    assert steps == ["uncordoned"]
    assert len(api.patches) == 2 and api.doc["spec"] == {"unschedulable": False, "taints": []}   # untaint, uncordon


def test_a_withdrawal_that_failed_is_started_again():
    """A withdrawal stopped before it could uncordon (the executor stopping it) is retried next turn."""
    api = FakeApi()
    driver = KubeScheduler(build({"kubernetes": {"api_url": "http://127.0.0.1:1"}}), lambda: api)
    w = Withdrawal("n1", "sco.io/notice", frozenset({"cordoned"}))
    try:
        driver.withdraw(w, 0.0)
        first = driver.withdrawals["n1"]
        wait_for(lambda: not first.alive, 5, "the withdrawal done")
        first.succeeded = False      # as if it had ended without reaching the server
        driver.withdraw(w, 0.0)
        assert driver.withdrawals["n1"] is not first
        wait_for(lambda: not driver.withdrawals["n1"].alive, 5, "the second withdrawal done")
    finally:
        driver.close()


def test_a_notice_withdrawn_before_anything_was_done_on_the_node_is_withdrawn_once():
    """Nothing cordoned, no drain running: no call to make, only the state to report (once)."""
    api = FakeApi()
    driver = KubeScheduler(build({"kubernetes": {"api_url": "http://127.0.0.1:1"}}), lambda: api)
    try:
        driver.withdraw(Withdrawal("n2", "sco.io/notice"), 0.0)
        driver.withdraw(Withdrawal("n2", "sco.io/notice"), 0.1)
        wait_for(lambda: driver.withdrawals == {}, 1, "no withdrawal runner")
        reports = driver.reports()
    finally:
        driver.close()
    assert reports == [NewState("n2", "withdrawn")] and api.patches == []


class FailingApi(FakeApi):
    """The server answers nothing ``unanswered`` times, then throttles ``throttled`` times, then agrees."""

    def __init__(self, unanswered: int, throttled: int) -> None:
        super().__init__()
        self.script = ["down"] * unanswered + ["throttled"] * throttled

    def get_node(self) -> dict[str, Any]:
        if self.script:
            if self.script.pop(0) == "down":
                raise Unreachable("GET /api/v1/nodes/node-a: connection refused")
            e = Throttled(429, "TooManyRequests", "Too many requests, please try again later.")
            e.retry_after = 1.0
            raise e
        return super().get_node()


def test_a_withdrawal_retries_with_jittered_backoff_not_every_second():
    waits: list[float] = []
    reports: list[Any] = []
    draws = iter([0.0, 1.0, 0.5, 0.0, 1.0])
    api = FailingApi(unanswered=3, throttled=2)
    runner = WithdrawRunner("n1", "sco.io/notice", lambda: api, reports.append,   # type: ignore[arg-type, return-value]
                            wait=lambda s: waits.append(s) or False, rand=lambda: next(draws)).start()
    wait_for(lambda: runner.succeeded and not runner.alive, 5, "the withdrawal done")
    # No answer: 0.5 s doubling, + up to 50 % jitter (the draws 0, 1, 0.5); throttled: at least the
    # Retry-After (1 s), doubling, + up to 50 %.
    assert waits == [0.5, 1.5, 2.5, 1.0, 3.0]
    assert [r.event for r in reports if isinstance(r, StepDone)] == ["drain.uncordoned"]
    assert sum(1 for r in reports if getattr(r, "name", "") == "drain.uncordon_failed") == 2   # each text once


def test_withdrawals_of_different_notices_draw_different_waits():
    def first_waits(nid: str) -> list[float]:
        waits: list[float] = []
        api = FailingApi(unanswered=3, throttled=0)
        r = WithdrawRunner(nid, "sco.io/notice", lambda: api, lambda _: None,   # type: ignore[arg-type, return-value]
                           wait=lambda s: waits.append(s) or False).start()
        wait_for(lambda: r.succeeded and not r.alive, 5, "the withdrawal done")
        return waits
    a, b = first_waits("notice-a"), first_waits("notice-b")
    assert a != b and all(0.5 <= w <= 0.75 for w in a[:1] + b[:1])


def test_a_drain_runner_that_crashes_is_restarted_after_a_growing_pause_and_each_restart_is_said():
    """Issue 26 point 7: a runner ended by an exception nobody foresaw is started again -- after a
    pause that doubles with each crash in a row -- and every restart is counted and said as
    ``agent.thread_restarted`` for its notice, not left as a drain that silently stopped."""
    starts: list[float] = []

    def broken_api() -> Any:
        starts.append(time.monotonic())
        raise RuntimeError("a bug nobody foresaw")

    config = build({"node": {"name": "node-a", "scheduler": "kubernetes"},
                    "kubernetes": {"api_url": "http://127.0.0.1:1"}})
    sched = KubeScheduler(config, broken_api)
    o = order("n1", "reclaim", 120)
    said: list[Announce] = []
    try:
        deadline = time.monotonic() + 15
        while len(said) < 3 and time.monotonic() < deadline:
            sched.advance(o, time.time())
            said += [r for r in sched.reports() if isinstance(r, Announce) and r.event == "agent.thread_restarted"]
            time.sleep(0.02)
    finally:
        sched.close()
    assert [a.data["restarts"] for a in said] == [1, 2, 3]
    assert [a.data["pause_s"] for a in said] == [pause_for(n, RESTART_AFTER_S) for n in (1, 2, 3)]
    assert all(a.notice_id == "n1" and "a bug nobody foresaw" in a.data["error"] for a in said)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps[0] >= RESTART_AFTER_S - 0.05 and gaps[1] >= 2 * RESTART_AFTER_S - 0.05   # it waited, longer
