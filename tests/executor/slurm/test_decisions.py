"""The Slurm recipe's pure decisions: phases, what to signal, requeue, kill, resume, report."""
from __future__ import annotations

from common.contract import SlurmPolicy
from common.wire import Budget, phase_ends
from executor.slurm.cli import NodeInfo
from executor.slurm.rules import (
    drain_reason,
    is_agent_reason,
    local_plan,
    new_memo,
    phase_at,
    remaining,
    to_evict,
    undo_action,
    unsignalled,
)

BUDGET = Budget(budget_s=100, checkpoint_s=40, evict_s=50, margin_s=10)
POLICY = SlurmPolicy(signal="SIGUSR1", signal_scope="batch", on_drain="requeue")


def node(flags: str, reason: str = "") -> NodeInfo:
    return NodeInfo("n1", frozenset(flags.split("+")), reason)


def test_phase_by_own_clock():
    c = phase_ends(0.0, 120.0, BUDGET)
    assert [phase_at(c, t, None) for t in (0.0, 39.9, 40.0, 89.9, 90.0)] == [
        "checkpoint", "checkpoint", "evict", "evict", "kill"]


def test_verifier_level_moves_the_phase_forward_never_back():
    """The escalation level is a second opinion: it can only hurry the drain."""
    c = phase_ends(0.0, 120.0, BUDGET)
    assert phase_at(c, 1.0, "checkpoint_over") == "evict"
    assert phase_at(c, 1.0, "evict_over") == "kill"
    assert phase_at(c, 1.0, "final") == "kill"
    assert phase_at(c, 95.0, "checkpoint_over") == "kill"
    assert phase_at(c, 1.0, "bogus") == "checkpoint"


def test_reason_names_the_notice_and_marks_it_as_the_agents():
    reason = drain_reason("n-7", "reclaim", 1764417600.0)
    assert reason == "sco-agent notice n-7 reclaim deadline 2025-11-29T12:00:00.000Z"
    assert is_agent_reason(reason)
    assert not is_agent_reason("maintenance by ops")


def test_signal_once_per_job_whichever_way_it_went():
    memo = new_memo(POLICY)
    memo.signalled["1"] = 5.0
    memo.local["checkpoint"]["2"] = 5.0
    assert unsignalled([1, 2, 3], memo) == [3]


def test_requeue_retried_only_after_a_pause_and_never_when_refused():
    memo = new_memo(POLICY)
    memo.evicted["1"] = 100.0
    memo.refused["2"] = "presently disabled"
    assert to_evict([1, 2, 3], memo, 102.0) == [3]
    assert to_evict([1, 2, 3], memo, 105.0) == [1, 3]


def test_local_plan_follows_the_phase_and_never_repeats():
    memo = new_memo(POLICY)
    assert local_plan("checkpoint", [1], memo) == [(1, "SIGUSR1", "batch", "checkpoint")]
    memo.local["checkpoint"]["1"] = 1.0
    assert local_plan("checkpoint", [1], memo) == []
    assert local_plan("evict", [1], memo) == [(1, "SIGTERM", "full", "term")]
    memo.local["term"]["1"] = 2.0
    assert local_plan("evict", [1], memo) == []
    assert local_plan("kill", [1], memo) == [(1, "SIGKILL", "full", "kill")]


def test_local_plan_leaves_a_job_whose_requeue_was_refused():
    memo = new_memo(POLICY)
    memo.refused["4"] = "presently disabled"
    assert local_plan("kill", [4, 5], memo) == [(5, "SIGKILL", "full", "kill")]


def test_done_needs_both_facts():
    """Empty only when squeue lists nothing AND sinfo says drained."""
    assert remaining([], "drained") == []
    assert remaining([7], "") == ["7"]
    assert remaining([], "draining") == ["node:draining"]
    assert remaining([], "mixed") == ["node:mixed"]
    assert remaining([], "") == ["node:unknown"]


def test_resume_only_the_agents_own_drain():
    ours = "sco-agent notice n1 reclaim deadline 2026-11-29T12:00:00Z"
    assert undo_action(node("IDLE+DRAIN", ours), other_notices=False) == "resume"
    assert undo_action(node("IDLE+DRAIN", "disk swap (ops)"), other_notices=False) == "kept_operator_drain"
    assert undo_action(node("IDLE+DRAIN", ours), other_notices=True) == "kept_for_other_notice"
    assert undo_action(node("IDLE"), other_notices=False) == "not_drained"


def test_no_resume_until_a_restarted_controller_has_heard_slurmd():
    """Found by the chaos run: right after a slurmctld restart the node is UNKNOWN+DRAIN; a RESUME then
    fails ("Invalid node state specified") but clears the DRAIN, so the undo was recorded as an error
    followed by "not_drained". The undo waits for the node to report in, then resumes."""
    ours = "sco-agent notice n1 reclaim deadline 2026-11-29T12:00:00Z"
    assert undo_action(node("UNKNOWN+DRAIN", ours), other_notices=False) == "wait"
    assert undo_action(node("UNKNOWN", ""), other_notices=False) == "wait"
    assert undo_action(node("DOWN+DRAIN", ours), other_notices=False) == "resume"
