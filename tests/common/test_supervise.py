"""common.supervise: a worker thread that raises, or returns, runs again after a growing pause;
every restart is counted and said (issue 26, point 7: no silently dead thread)."""
from __future__ import annotations

import io
import threading

import ujson

from common.log import Logger
from common.supervise import Crash, Supervised, pause_for, report
from tests.support.wait import wait_for


def test_a_body_that_raises_runs_again_after_a_doubling_pause_and_each_restart_is_counted():
    runs: list[int] = []
    serving = threading.Event()

    def body(stopping: threading.Event) -> None:
        runs.append(len(runs))
        if len(runs) <= 3:
            raise KeyError(f"unexpected {len(runs)}")
        serving.set()
        stopping.wait()

    worker = Supervised("w", body, first_s=0.01, max_s=1.0).start()
    try:
        assert serving.wait(10), "the body never ran a fourth time"
        crashes = worker.take_crashes()
        assert worker.restarts == 3 and worker.is_alive()
        assert [(c.error, c.restarts, c.pause_s) for c in crashes] == [
            ("KeyError: 'unexpected 1'", 1, 0.01), ("KeyError: 'unexpected 2'", 2, 0.02),
            ("KeyError: 'unexpected 3'", 3, 0.04)]
        assert worker.take_crashes() == []   # each said once
    finally:
        worker.stop()
    assert worker.join(5)


def test_a_body_that_returns_before_stop_is_a_dead_worker_and_runs_again():
    runs = []

    def body(stopping: threading.Event) -> None:
        runs.append(1)
        if len(runs) >= 2:
            stopping.wait()

    worker = Supervised("w", body, first_s=0.01).start()
    wait_for(lambda: len(runs) >= 2, 10, "a second run")
    worker.stop()
    assert worker.join(5)
    assert [c.error for c in worker.take_crashes()] == ["returned"] and worker.restarts == 1


def test_stop_ends_the_worker_even_during_a_pause_and_a_stopped_body_is_no_crash():
    def body(stopping: threading.Event) -> None:
        raise RuntimeError("always")

    worker = Supervised("w", body, first_s=60.0).start()
    wait_for(lambda: worker.restarts == 1, 10, "the first crash")
    worker.stop()
    assert worker.join(5) and worker.restarts == 1


def test_the_pause_doubles_to_its_cap_and_a_healthy_run_starts_the_streak_afresh():
    assert [pause_for(n, 0.5, 30.0) for n in (1, 2, 3, 4, 7, 8, 1000)] == [0.5, 1.0, 2.0, 4.0, 30.0, 30.0, 30.0]
    now = [0.0]
    lengths = iter([0.0, 0.0, 100.0, 0.0])   # how long each run lasts on the fake clock
    done = threading.Event()

    def body(stopping: threading.Event) -> None:
        try:
            now[0] += next(lengths)
        except StopIteration:
            done.set()
            stopping.wait()
            return
        raise ValueError("x")

    worker = Supervised("w", body, first_s=0.001, max_s=1.0, healthy_after_s=60.0, clock=lambda: now[0]).start()
    assert done.wait(10)
    worker.stop()
    # The third run lasted 100 s (healthy): its crash is the first of a new streak.
    assert [c.pause_s for c in worker.take_crashes()] == [0.001, 0.002, 0.001, 0.002]


def test_a_failing_crash_hook_does_not_end_the_supervisor():
    runs = []

    def body(stopping: threading.Event) -> None:
        runs.append(1)
        if len(runs) < 3:
            raise RuntimeError("x")
        stopping.wait()

    def hook(crash: Crash) -> None:
        raise OSError("the hook fails too")

    worker = Supervised("w", body, first_s=0.01, on_crash=hook).start()
    wait_for(lambda: len(runs) >= 3, 10, "a third run")
    worker.stop()
    assert worker.join(5) and worker.restarts == 2


def test_report_says_each_crash_once_as_a_log_line_and_an_event():
    def body(stopping: threading.Event) -> None:
        raise AttributeError("'list' object has no attribute 'get'")

    worker = Supervised("verifier-read", body, first_s=60.0, max_s=60.0).start()
    wait_for(lambda: worker.restarts == 1, 10, "a crash")
    worker.stop()
    out, events = io.StringIO(), []
    assert report(worker, Logger("verifier", stream=out), lambda t, data: events.append((t, data))) == 1
    assert report(worker, Logger("verifier", stream=out), lambda t, data: events.append((t, data))) == 0
    line = ujson.loads(out.getvalue())
    assert line["msg"] == "agent.thread_restarted" and line["level"] == "error" and line["thread"] == "verifier-read"
    assert events == [("agent.thread_restarted", {"thread": "verifier-read", "restarts": 1, "pause_s": 60.0,
                                                  "error": "AttributeError: 'list' object has no attribute 'get'"})]
