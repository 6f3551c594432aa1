"""Issue 26, points 1 and 2, on Kubernetes: the scheduler hands the node's one drain to the notice that
governs it (a reclaim behind a maintenance drain held by a PDB), and a withdrawal that another notice
still needs never opens the node -- sampled every 20 ms. Against the API-server emulator."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.config import build
from common.wire import EVICT_OVER, Budget, phase_ends
from executor.kube.api import KubeApi
from executor.kube.node_patch import A_NOTICE
from executor.kube.scheduler import KubeScheduler
from executor.scheduler import Marker, NewState, Order, Remaining, Report, StepDone, Withdrawal
from tests.executor.kube.harness import NODE, TAINT_KEY
from tests.support.sampler import Sampler
from tests.support.wait import wait_for


class Loop:
    """The executor loop's side of the scheduler: orders in, reports collected (as Drains does)."""

    def __init__(self, kube: Any) -> None:
        config = build({"kubernetes": {"api_url": kube.url}})
        self.sched = KubeScheduler(config, lambda: KubeApi(kube.url, NODE, timeout_s=1.0))
        self.reports: list[Report] = []

    def pump(self) -> list[Report]:
        for r in self.sched.reports():
            self.reports.append(r)
            saved = getattr(r, "saved", None)
            if saved is not None:
                saved.set()
        return self.reports

    def until(self, probe: Any, timeout: float, what: str, order: Order | None = None) -> Any:
        def step() -> Any:
            if order is not None:
                self.sched.advance(order, time.time())
            self.pump()
            return probe()
        return wait_for(step, timeout, what)

    def events(self, nid: str, event: str) -> list[dict[str, Any]]:
        return [r.data for r in self.reports if isinstance(r, StepDone) and r.notice_id == nid and r.event == event]

    def left(self, nid: str) -> tuple[str, ...] | None:
        left = [r.items for r in self.reports if isinstance(r, Remaining) and r.notice_id == nid]
        return left[-1] if left else None

    def state(self, nid: str) -> str | None:
        states = [r.state for r in self.reports if isinstance(r, NewState) and r.notice_id == nid]
        return states[-1] if states else None


@pytest.fixture
def loop(kube) -> Iterator[Loop]:
    lp = Loop(kube)
    yield lp
    lp.sched.close()


def order(nid: str, kind: str, deadline_in: float, **kw: Any) -> Order:
    now = time.time()
    budget = Budget(45, 0, 40, 5)
    fields: dict[str, Any] = {"notice_id": nid, "kind": kind, "deadline": now + deadline_in, "received_at": now,
                              "budget": budget, "ends": phase_ends(now, now + deadline_in, budget),
                              "cordon_only": False, "taint_key": TAINT_KEY, "pdb_blocked": "report",
                              "exclude_from_lb": False}
    return Order(**{**fields, **kw})


def taint_value(kube: Any) -> str | None:
    return next((t["value"] for t in kube.node(NODE)["spec"].get("taints") or [] if t["key"] == TAINT_KEY), None)


def test_a_reclaim_takes_over_a_maintenance_drain_held_by_a_pdb(kube, loop):
    """The maintenance drain waits on a pod whose PDB allows nothing; the reclaim's order takes the
    drain over (the previous runner is woken and stopped at once): its taint value and annotation, and its
    escalation (delete)."""
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    maint = order("maint", "maintenance", 600)
    loop.until(lambda: loop.left("maint") == ("default/db-0",), 20, "the maintenance drain held by db-0", maint)
    assert taint_value(kube) == "maintenance"
    reclaim = order("reclaim", "reclaim", 40, pdb_blocked="delete", level=EVICT_OVER)
    loop.until(lambda: "reclaim" in loop.sched.runners and loop.sched.runners["reclaim"].alive, 5,
               "the reclaim's runner", reclaim)
    assert "maint" not in loop.sched.runners   # stopped first: one drain on the node at a time
    loop.until(lambda: loop.state("reclaim") == "done", 20, "the reclaim's drain done", reclaim)
    assert loop.events("reclaim", "drain.cordoned")     # its own cordon, with its own taint value
    node = kube.node(NODE)
    assert node["spec"]["unschedulable"] is True and taint_value(kube) == "reclaim"
    assert node["metadata"]["annotations"][A_NOTICE] == "reclaim"
    assert kube.pod_names(NODE) == set()
    assert loop.state("maint") is None   # stopped, not ended: the core ends it with the reclaim


def cordon_and_taint(kube: Any) -> tuple[bool, str | None]:
    """The node's cordon and our taint (sampled every 20 ms, on a thread of its own)."""
    node = kube.node(NODE)
    return bool(node["spec"].get("unschedulable")), taint_value(kube)


@pytest.mark.parametrize("cancelled", ["reclaim", "maint"])
def test_withdrawing_one_of_two_never_opens_the_node(kube, loop, cancelled):
    """Either notice withdrawn while the drain runs (the governing one's runner is stopped mid-drain):
    the node stays cordoned and tainted throughout, and the marks name the notice that is left."""
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    maint, reclaim = order("maint", "maintenance", 600), order("reclaim", "reclaim", 40)
    loop.until(lambda: loop.left("reclaim") == ("default/db-0",), 20, "the reclaim's drain held by db-0", reclaim)
    kept, kept_order = (maint, maint) if cancelled == "reclaim" else (reclaim, reclaim)
    sampler = Sampler(lambda: cordon_and_taint(kube), 0.02)
    try:
        w = Withdrawal(cancelled, TAINT_KEY, frozenset({"cordoned"}), others_active=True,
                       keep=frozenset({kept.notice_id}), marker=Marker(kept.notice_id, kept.kind, kept.deadline))

        def withdrawn() -> bool:
            loop.sched.withdraw(w, time.time())
            loop.sched.advance(kept_order, time.time())
            loop.pump()
            return loop.state(cancelled) == "withdrawn"
        wait_for(withdrawn, 20, f"{cancelled} withdrawn")
        loop.until(lambda: kube.node(NODE)["metadata"]["annotations"].get(A_NOTICE) == kept.notice_id, 10,
                   "the marks naming the notice that is left", kept_order)
        time.sleep(0.3)
    finally:
        samples = sampler.stop()
    assert samples and all(cordoned and value is not None for cordoned, value in samples), samples
    assert taint_value(kube) == kept.kind
    (done,) = [r for r in loop.reports if isinstance(r, StepDone) and r.notice_id == cancelled
               and r.event == "drain.uncordoned"]
    assert done.data["action"] == "kept_for_other_notice"
    # The last one withdrawn: now the node opens.
    last = Withdrawal(kept.notice_id, TAINT_KEY, frozenset({"cordoned"}))
    wait_for(lambda: (loop.sched.withdraw(last, time.time()), loop.pump(), loop.state(kept.notice_id))[2]
             == "withdrawn", 20, "the last withdrawal")
    assert kube.node(NODE)["spec"].get("unschedulable") in (None, False) and taint_value(kube) is None
