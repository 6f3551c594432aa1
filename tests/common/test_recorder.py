"""The one throttled recorder (common/recorder.py): first at once, the rest counted, nothing unsaid."""
from __future__ import annotations

from common.recorder import Recorder


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(every_s: float = 10.0, limit: int = 256) -> tuple[Recorder, Clock, list[tuple[str, dict]]]:
    said: list[tuple[str, dict]] = []
    clock = Clock()
    return Recorder(lambda t, d: said.append((t, d)), every_s, clock, limit), clock, said


def test_the_first_occurrence_is_said_at_once_and_repeats_within_the_window_only_counted():
    r, _clock, said = make()
    assert r.record("x.error", "timeout", {"detail": "a"}) is True
    assert all(r.record("x.error", "timeout", {"detail": f"b{i}"}) is False for i in range(99))
    r.tick()
    assert said == [("x.error", {"detail": "a", "count": 1, "total": 1})]
    assert r.total("x.error", "timeout") == 100


def test_what_accumulated_is_said_once_the_window_passes_with_count_since_last_and_total():
    r, clock, said = make()
    for _ in range(5):
        r.record("x.error", "timeout", {"detail": "d"})
    clock.now += 9.9
    r.tick()
    assert len(said) == 1
    clock.now += 0.1
    r.tick()
    assert said[-1] == ("x.error", {"detail": "d", "count": 4, "total": 5})
    r.tick()
    clock.now += 100
    r.tick()
    assert len(said) == 2                       # nothing pending: nothing said
    assert r.record("x.error", "timeout", n=3) is True   # window long past: said at once
    assert said[-1] == ("x.error", {"count": 3, "total": 8})


def test_keys_are_type_and_reason_each_with_its_own_window():
    r, _clock, said = make()
    r.record("a", "r1")
    r.record("a", "r2")
    r.record("b", "r1")
    r.record("a", "r1")
    assert [t for t, _ in said] == ["a", "a", "b"]
    assert r.total("a", "r1") == 2 and r.total("b", "r1") == 1 and r.total("b", "zz") == 0


def test_force_says_everything_pending_at_shutdown():
    r, _clock, said = make()
    r.record("a", "r1")
    r.record("a", "r1")
    r.record("b", "r2")
    r.record("b", "r2", n=4)
    r.tick(force=True)
    assert said[2:] == [("a", {"count": 1, "total": 2}), ("b", {"count": 4, "total": 5})]
    assert sum(d["count"] for _, d in said) == r.total("a", "r1") + r.total("b", "r2")
    r.tick(force=True)
    assert len(said) == 4


def test_forget_makes_the_next_occurrence_said_at_once():
    r, _clock, said = make()
    r.record("a", "r")
    r.forget("a", "r")
    assert r.record("a", "r") is True
    assert [d["count"] for _, d in said] == [1, 1]


def test_a_flood_of_distinct_keys_keeps_memory_bounded_and_each_first_is_said():
    r, _clock, said = make(limit=8)
    for i in range(1000):
        r.record("a", f"text {i}")
    assert len(said) == 1000
    assert len(r._reported_at) <= 8 and len(r.totals) <= 8
