"""executor.drain (the core) for issue 16: an ignored kind does nothing at all; a config error is said
once and kept for the verdict; the order carries the contract's fallback choice and moment."""
from __future__ import annotations

import io
from typing import Any

from common.contract import BUILTIN, FALLBACK_MARGIN_S, Contract
from common.log import Logger
from common.wire import DrainState, Step
from executor.drain import Drains
from executor.scheduler import Announce, Order, Problem, Report, Withdrawal
from tests.support.notices import notice


class FakeScheduler:
    def __init__(self) -> None:
        self.orders: list[Order] = []
        self.pending: list[Report] = []

    def advance(self, order: Order, now: float) -> None:
        self.orders.append(order)

    def withdraw(self, w: Withdrawal, now: float) -> None:
        pass

    def reports(self) -> list[Report]:
        out, self.pending = self.pending, []
        return out

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


class FakeShell:
    def __init__(self) -> None:
        self.log = Logger("executor", stream=io.StringIO())
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def emit(self, type: str, notice_id: str, data: dict[str, Any], now: float) -> object:
        self.events.append((type, notice_id, data))
        return None

    def save(self) -> bool:
        return True

    def publish(self) -> None:
        pass


def drains(contract: Contract = BUILTIN) -> tuple[Drains, FakeScheduler, FakeShell]:
    sched, shell = FakeScheduler(), FakeShell()
    d = Drains(sched, None, shell, {})
    d.contract, d.contract_heard = contract, True
    return d, sched, shell


def test_a_kind_the_contract_ignores_is_never_handed_to_the_scheduler():
    """GCP's live migration (built-in: ignore) and a rebalance a contract set to ignore: no cordon, nothing."""
    contract = Contract.from_payload({**BUILTIN.to_dict(), "kinds": {"rebalance": "ignore"}})
    d, sched, shell = drains(contract)
    for kind in ("live_migration", "rebalance", "pause"):
        n = notice(f"n-{kind}", kind)
        d.active = {n.id: n}
        d.turn(n.received_at + 1, 1.0)
        d.turn(n.received_at + 2, 2.0)
        assert d.records[n.id].state == DrainState.IGNORED
        assert [e[0] for e in shell.events if e[1] == n.id] == ["drain.started", "drain.ignored"]
    assert sched.orders == []


def test_the_order_carries_the_fallback_choice_and_moment():
    d, sched, _ = drains()
    for kind, allowed in (("reclaim", True), ("maintenance", False), ("rebalance", False)):
        n = notice(f"n-{kind}", kind)
        d.active = {n.id: n}
        d.turn(n.received_at, 0.0)
        o = sched.orders[-1]
        assert (o.notice_id, o.fallback_allowed) == (n.id, allowed)
        assert o.fallback_at == n.deadline - BUILTIN.fallback.lead_s - FALLBACK_MARGIN_S


def test_a_config_error_is_said_once_and_kept_for_the_verdict():
    d, sched, shell = drains()
    n = notice()
    d.active = {n.id: n}
    d.turn(n.received_at, 0.0)
    sched.pending = [Problem(n.id, "403 Forbidden: nope"), Problem(n.id, "403 Forbidden: nope")]
    d.on_reports(n.received_at + 1, 1.0)
    rec = d.records[n.id]
    assert rec.problem == "403 Forbidden: nope" and Step.CONFIG_ERROR in rec.steps
    assert [e[2] for e in shell.events if e[0] == "drain.config_error"] == [{"reason": "403 Forbidden: nope"}]
    assert rec.state == DrainState.RUNNING   # still retried: someone may fix the credential


def test_a_report_of_the_scheduler_itself_is_said_not_dropped():
    """A scheduler's worker that restarted says so under no notice (``Announce`` with an empty id):
    the core spools it as it is, where a report for an unknown notice would be dropped."""
    d, sched, shell = drains()
    data = {"thread": "slurm-drain", "error": "RuntimeError: x", "restarts": 1, "pause_s": 0.5}
    sched.pending = [Announce("", "agent.thread_restarted", data), Announce("gone", "drain.error", {})]
    d.on_reports(1796000000.0, 1.0)
    assert shell.events == [("agent.thread_restarted", "", data)]


def test_each_pod_the_drain_touches_is_in_the_record_of_every_notice_it_serves():
    """Issue 28, point 8: the executor's events about a pod become its fate in the drain record of
    the notice, and of the other notices the same drain serves (each verdict lists its pods)."""
    d, sched, _ = drains()
    first, second = notice("n1", deadline_in=120), notice("n2", deadline_in=300)
    d.active = {"n1": first, "n2": second}
    d.turn(first.received_at, 0.0)
    assert set(d.records) == {"n1", "n2"}
    gov = d.service.governing
    sched.pending = [Announce(gov, "drain.pod_held", {"pod": "ns/job", "reason": "extended"}),
                     Announce(gov, "drain.evicted", {"pod": "ns/job", "uid": "u1"}),
                     Announce(gov, "drain.pod_skipped", {"pod": "ns/keep", "reason": "wish:skip"})]
    d.on_reports(first.received_at + 1, 1.0)
    for rec in d.records.values():
        assert {k: (f.outcome, f.held) for k, f in rec.pods.items()} == {
            "ns/job": ("evicted", "extended"), "ns/keep": ("skipped", "")}
