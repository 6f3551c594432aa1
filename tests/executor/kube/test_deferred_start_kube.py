"""Issue 28, point 2, on Kubernetes: the drain core (executor.drain) and the Kubernetes scheduler
against the API-server emulator, on the real clocks. A deferred maintenance cordons and taints the
node at once and evicts nothing until ``deadline - budget_s``, then drains; a cordon-only maintenance
never evicts, a reclaim behind it drains at once, and withdrawn leaves the node cordoned for the
maintenance with its evictions stopped."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.config import build
from common.contract import BUILTIN, Contract
from common.notice import Notice
from common.wire import DrainState
from executor.drain import Drains
from executor.kube.api import KubeApi
from executor.kube.pdb_share import PROBE_QUIET_S
from executor.kube.scheduler import KubeScheduler
from tests.executor.kube.harness import NODE, TAINT_KEY
from tests.executor.test_drain_core import FakeShell
from tests.support.notices import notice
from tests.support.wait import wait_for

# A 6 s budget (a 2 s margin): a maintenance 10 s away starts its drain 4 s after it is heard.
CONTRACT = Contract.from_payload({**BUILTIN.to_dict(), "drain": {"budget_s": 6, "checkpoint_s": 1, "evict_s": 3,
                                                                  "margin_s": 2}, "first_write_spread_ms": 0})
CORDON_ONLY = Contract.from_payload({**CONTRACT.to_dict(), "kinds": {"maintenance": "cordon"}})


class CoreLoop:
    """The executor's loop, without its sockets: the core turns every 50 ms on the real clocks and
    takes the scheduler's reports; the test changes the active notices between turns."""

    def __init__(self, kube: Any, contract: Contract) -> None:
        config = build({"kubernetes": {"api_url": kube.url}})
        self.sched = KubeScheduler(config, lambda: KubeApi(kube.url, NODE, timeout_s=1.0))
        self.shell = FakeShell()
        self.drains = Drains(self.sched, None, self.shell, {})
        self.drains.contract, self.drains.contract_heard = contract, True
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self.lock:
                now, mono = time.time(), time.monotonic()
                self.drains.turn(now, mono)   # type: ignore[arg-type]
                self.drains.on_reports(now, mono)   # type: ignore[arg-type]

    def set(self, active: list[Notice], withdrawn: tuple[str, ...] = ()) -> None:
        with self.lock:
            self.drains.active = {n.id: n for n in active}
            self.drains.withdrawn = frozenset(withdrawn)

    def state(self, nid: str) -> str | None:
        with self.lock:
            rec = self.drains.records.get(nid)
            return rec.state if rec is not None else None

    def events(self, type_: str, nid: str) -> list[dict[str, Any]]:
        with self.lock:
            return [data for t, n, data in self.shell.events if t == type_ and n == nid]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sched.close()


@pytest.fixture
def loops() -> Iterator[list[CoreLoop]]:
    started: list[CoreLoop] = []
    yield started
    for lp in started:
        lp.close()


def taint(kube: Any) -> str | None:
    return next((t["value"] for t in kube.node(NODE)["spec"].get("taints") or [] if t["key"] == TAINT_KEY), None)


def evicted(kube: Any) -> list[str]:
    return [name for _, name, status in kube.evictions() if status == 201]


def test_a_deferred_maintenance_cordons_at_once_evicts_nothing_until_its_start_then_drains(kube, loops):
    kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
    lp = CoreLoop(kube, CONTRACT)
    loops.append(lp)
    now = time.time()
    maint = notice("maint", "maintenance", deadline_in=10.0, now=now, received_in=0.0)
    starts_at = maint.deadline - CONTRACT.drain.budget_s
    lp.set([maint])
    wait_for(lambda: kube.node(NODE)["spec"].get("unschedulable") and taint(kube) == "maintenance", 3,
             "the node cordoned and tainted at once")
    wait_for(lambda: lp.state(maint.id) == DrainState.WAITING, 3, "the drain waiting for its start")
    while time.time() < starts_at - 0.1:   # sampled every 50 ms: nothing moved before the start
        assert kube.evictions() == [] and kube.pod_names(NODE) == {"web"}
        time.sleep(0.05)
    wait_for(lambda: evicted(kube) == ["web"], 8, "web evicted once the drain started")
    (started,) = lp.events("drain.deferred_started", maint.id)
    assert started["cordoned"] is True and started["waited"] is True and started["late_ms"] >= 0
    wait_for(lambda: lp.state(maint.id) == DrainState.DONE, 8, "the drain done")


def test_a_cordon_only_maintenance_never_evicts_and_a_reclaim_behind_it_drains_until_withdrawn(kube, loops):
    """The reclaim evicts at once (a pod whose PDB allows nothing stays, blocked); withdrawn, its
    evictions stop and the node stays cordoned, tainted for the maintenance."""
    kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
    kube.add_pod("db-0", NODE, labels={"app": "db"}, owner=("StatefulSet", "db"))
    lp = CoreLoop(kube, CORDON_ONLY)
    loops.append(lp)
    now = time.time()
    maint = notice("maint", "maintenance", deadline_in=600.0, now=now, received_in=0.0)
    lp.set([maint])
    wait_for(lambda: lp.state(maint.id) == DrainState.CORDONED_ONLY, 5, "the maintenance cordoned")
    assert kube.node(NODE)["spec"].get("unschedulable") and taint(kube) == "maintenance"
    time.sleep(1.0)
    assert kube.evictions() == []
    reclaim = notice("reclaim", "reclaim", deadline_in=60.0, now=time.time(), received_in=0.0)
    lp.set([maint, reclaim])
    wait_for(lambda: evicted(kube) == ["web"], 8, "the reclaim evicting at once")
    # Its budget shows no room: past the cutoff (4 s) it is not sent but reported once stuck (3 s),
    # and asked once its watched status has stood still PROBE_QUIET_S (pdb_share).
    wait_for(lambda: any(e["pod"] == "default/db-0" for e in lp.events("drain.eviction_blocked", reclaim.id)), 10,
             "db-0 reported blocked")
    lp.set([maint], withdrawn=(reclaim.id,))
    wait_for(lambda: lp.state(reclaim.id) == DrainState.WITHDRAWN, 8, "the reclaim withdrawn")
    assert lp.events("drain.uncordoned", reclaim.id)[-1]["action"] == "kept_for_other_notice"
    tried = len(kube.evictions())
    time.sleep(max(2.0, reclaim.received_at + PROBE_QUIET_S + 1.0 - time.time()))   # past when a drain would ask
    assert len(kube.evictions()) == tried and kube.pod_names(NODE) == {"db-0"}
    node = kube.node(NODE)
    assert node["spec"].get("unschedulable") and taint(kube) == "maintenance"
    assert lp.state(maint.id) == DrainState.CORDONED_ONLY


def test_a_deferred_maintenance_cancelled_before_its_start_is_uncordoned_and_never_evicts(kube, loops):
    kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
    lp = CoreLoop(kube, CONTRACT)
    loops.append(lp)
    maint = notice("maint", "maintenance", deadline_in=8.0, now=time.time(), received_in=0.0)
    starts_at = maint.deadline - CONTRACT.drain.budget_s
    lp.set([maint])
    wait_for(lambda: lp.state(maint.id) == DrainState.WAITING, 5, "the drain waiting for its start")
    lp.set([], withdrawn=(maint.id,))
    wait_for(lambda: lp.state(maint.id) == DrainState.WITHDRAWN, 8, "the maintenance withdrawn")
    assert not kube.node(NODE)["spec"].get("unschedulable") and taint(kube) is None
    wait_for(lambda: time.time() > starts_at + 1.5, 10, "past its start")
    assert kube.evictions() == [] and lp.events("drain.deferred_started", maint.id) == []
