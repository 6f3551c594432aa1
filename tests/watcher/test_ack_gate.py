"""watcher.ack_gate: a finished drain is passed on to the provider (Azure acknowledges) once its
verdict is in, or once the margin after the node was empty has passed without one; each once,
whatever is repeated (issue 28, point 6)."""
from __future__ import annotations

from common.progress import PAST_SENT
from common.wire import DrainState, Step
from tests.support.drain_records import budget, record
from watcher.ack_gate import MAX_PASSED, VERDICT_SLACK_S, AckGate

T = 1_800_000_000.0
DONE = record(state=DrainState.DONE, budget=budget(5, 5, 10), steps={Step.NODE_EMPTY: T})
RUNNING = record(budget=budget(5, 5, 10))


def test_a_done_drain_waits_for_its_verdict_and_goes_once():
    gate = AckGate()
    gate.finished({"n1": DONE, "n2": RUNNING}, T + 1)
    assert gate.due({}, T + 2) == []                       # the executor's word alone: not yet
    assert gate.due({"n2": "overrun"}, T + 2) == []        # a verdict for a drain not done: nothing
    assert gate.due({"n1": "done"}, T + 3) == ["n1"]
    gate.finished({"n1": DONE}, T + 4)                     # repeated progress, repeated verdicts
    assert gate.due({"n1": "done"}, T + 4) == []


def test_any_verdict_lets_it_go_the_volumes_one_included():
    gate = AckGate()
    gate.finished({"n1": DONE}, T)
    assert gate.due({"n1": "volumes_attached"}, T + 11) == ["n1"]


def test_without_a_verdict_it_goes_once_the_margin_and_the_verifiers_read_have_passed():
    gate = AckGate()
    gate.finished({"n1": DONE}, T + 1)
    assert gate.due({}, T + 10 + VERDICT_SLACK_S - 0.01) == []
    assert gate.due({}, T + 10 + VERDICT_SLACK_S) == ["n1"]
    assert gate.due({}, T + 100) == []


def test_the_drains_passed_on_are_remembered_within_a_bound_the_newest_kept():
    """A watcher that runs for months passes on one drain after another: what it remembers of them
    stays bounded, and the newest (those the executor's progress still carries) are not passed again."""
    gate = AckGate()
    total = MAX_PASSED + 500
    for i in range(total):
        gate.finished({f"n{i}": DONE}, T)
        assert gate.due({f"n{i}": "done"}, T) == [f"n{i}"]
    assert len(gate.passed) == MAX_PASSED
    newest = {f"n{i}": DONE for i in range(total - PAST_SENT, total)}
    gate.finished(newest, T + 1)
    assert gate.waiting == {} and gate.due(dict.fromkeys(newest, "done"), T + 1) == []
