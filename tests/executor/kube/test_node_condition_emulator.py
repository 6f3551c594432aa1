"""The node's NoticeScheduled condition through the Kubernetes scheduler, against the API-server emulator:
with two notices (a takeover, then each cancelled in either order) it names the notice that governs
at every step and is never False while one remains; a restarted drain puts back one it never wrote;
a pod the agent deletes is marked first, and deleted still when the mark is refused.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.wire import EVICT_OVER
from executor.kube import conditions
from executor.kube.api import KubeApi
from executor.scheduler import Marker, Withdrawal
from tests.executor.kube.harness import NODE, TAINT_KEY, Drain, make_spec
from tests.executor.kube.test_many_notices_kube import Loop, order
from tests.support.sampler import Sampler
from tests.support.wait import wait_for


@pytest.fixture
def loop(kube: Any) -> Iterator[Loop]:
    lp = Loop(kube)
    yield lp
    lp.sched.close()


def scheduled(kube: Any) -> dict[str, Any] | None:
    return conditions.condition_of(kube.node(NODE), conditions.NOTICE_SCHEDULED)


def names(kube: Any, notice_id: str, kind: str) -> bool:
    c = scheduled(kube)
    return c is not None and c["status"] == "True" and c["reason"] == conditions.camel_case(kind) \
        and c["message"].startswith(f"notice {notice_id} from ")


def condition_now(kube: Any) -> tuple[Any, Any, str]:
    """The condition's (status, reason, message) (sampled every 20 ms, on a thread of its own)."""
    c = scheduled(kube) or {}
    return c.get("status"), c.get("reason"), c.get("message", "")


def withdraw_until_done(loop: Loop, w: Withdrawal, then: Any = None) -> None:
    def withdrawn() -> bool:
        loop.sched.withdraw(w, time.time())
        if then is not None:
            loop.sched.advance(then, time.time())
        loop.pump()
        return loop.state(w.notice_id) == "withdrawn"
    wait_for(withdrawn, 20, f"{w.notice_id} withdrawn")


@pytest.mark.parametrize("first", ["reclaim", "maint"])
def test_two_notices_the_condition_names_the_governing_one_and_turns_false_only_at_the_last(kube, loop, first):
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    maint = order("maint", "maintenance", 600, source="aws")
    reclaim = order("reclaim", "reclaim", 40, source="relay")
    loop.until(lambda: names(kube, "maint", "maintenance"), 20, "the condition naming the maintenance", maint)
    since = scheduled(kube)["lastTransitionTime"]   # type: ignore[index]
    sampler = Sampler(lambda: condition_now(kube), 0.02)
    try:
        loop.until(lambda: names(kube, "reclaim", "reclaim"), 20, "the condition naming the reclaim", reclaim)
        assert "from relay, deadline " in scheduled(kube)["message"]   # type: ignore[index]
        kept, kept_order = (maint, maint) if first == "reclaim" else (reclaim, reclaim)
        withdraw_until_done(loop, Withdrawal(first, TAINT_KEY, frozenset({"cordoned"}), others_active=True,
                                             keep=frozenset({kept.notice_id}),
                                             marker=Marker(kept.notice_id, kept.kind, kept.deadline, kept.source)),
                            then=kept_order)
        loop.until(lambda: names(kube, kept.notice_id, kept.kind), 10, "the condition naming the one left", kept_order)
        time.sleep(0.3)
    finally:
        samples = sampler.stop()
    assert samples and all(status == "True" for status, _, _ in samples), samples
    assert scheduled(kube)["lastTransitionTime"] == since   # type: ignore[index]   # True all along
    # The last one withdrawn: False, Withdrawn.
    withdraw_until_done(loop, Withdrawal(kept.notice_id, TAINT_KEY, frozenset({"cordoned"})))
    c = scheduled(kube)
    assert c is not None and (c["status"], c["reason"]) == ("False", "Withdrawn") and kept.notice_id in c["message"]
    assert not kube.node(NODE)["spec"].get("unschedulable")


def test_a_restarted_drain_puts_back_a_condition_it_never_wrote(kube, drains):
    """Killed between the cordon and the condition: the node is cordoned and annotated for the notice,
    the record says cordoned; the drain that starts again writes the condition (idempotent steps)."""
    kube.request("PATCH", f"/api/v1/nodes/{NODE}", {"spec": {"unschedulable": True}, "metadata": {
        "annotations": {"sco.io/notice-id": "n-test", "sco.io/notice-deadline": "2030-01-01T00:00:00Z",
                        "sco.io/cordoned-by-agent": "true"}}}, "application/strategic-merge-patch+json")
    assert scheduled(kube) is None
    d = Drain(lambda: KubeApi(kube.url, NODE, timeout_s=2.0), make_spec(steps_done=frozenset({"cordoned"}),
                                                                        source="aws"))
    drains.append(d)
    d.wait_state("done")
    assert names(kube, "n-test", "reclaim")
    assert d.events("drain.cordoned") == []   # the step was done already: not said again


def test_a_withdrawal_after_a_restart_turns_it_false(kube, loop):
    """The executor restarted (a new scheduler, nothing in memory) after the taint came off: the node's
    annotation still names the notice, so the withdrawal turns the condition and opens the node."""
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    o = order("n-1", "reclaim", 60, source="aws")
    loop.until(lambda: names(kube, "n-1", "reclaim"), 20, "the condition", o)
    loop.sched.close()
    again = Loop(kube)
    try:
        withdraw_until_done(again, Withdrawal("n-1", TAINT_KEY, frozenset({"cordoned"})))
    finally:
        again.sched.close()
    c = scheduled(kube)
    assert c is not None and (c["status"], c["reason"]) == ("False", "Withdrawn")


def deleted_after_the_cutoff(kube: Any, drains: list[Drain]) -> Drain:
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
    kube.add_pod("db-0", NODE, labels={"app": "db"}, owner=("StatefulSet", "db"))
    d = Drain(lambda: KubeApi(kube.url, NODE, timeout_s=2.0),
              make_spec(evict_s=1.0, deadline_in=30.0, margin_s=5.0, pdb_blocked="delete"))
    drains.append(d)
    d.wait_state("done", timeout=30)
    return d


def test_a_pod_the_agent_deletes_carries_its_disruption_target_first(kube, drains):
    since = max((e["seq"] for e in kube.requests()), default=0)
    d = deleted_after_the_cutoff(kube, drains)
    calls = [(e["method"], e["path"], e["status"]) for e in kube.requests(since=since)
             if "/pods/db-0" in e["path"] and e["method"] in ("PATCH", "DELETE")]
    assert calls[:2] == [("PATCH", "/api/v1/namespaces/default/pods/db-0/status", 200),
                         ("DELETE", "/api/v1/namespaces/default/pods/db-0", 200)], calls
    (patch,) = [e for e in kube.requests(since=since) if e["path"].endswith("/pods/db-0/status")]
    (cond,) = patch["body"]["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionTarget", "True", "TerminationByNodeAgent")
    assert "n-test" in cond["message"]
    assert d.events("drain.disruption_target_failed") == []


def test_a_refused_mark_does_not_stop_the_delete_and_is_counted(kube, drains):
    """The status write refused (403, as a server whose node identity lacks pods/status would): the
    machine goes anyway, so the delete goes ahead; an event says which pod went unmarked, with the count."""
    kube.fault("status", pattern=r"/pods/db-0/status$", status=403)
    d = deleted_after_the_cutoff(kube, drains)
    (ev,) = d.events("drain.disruption_target_failed")
    assert ev["pod"] == "default/db-0" and ev["count"] == 1 and "403" in ev["error"]
    assert [e["pod"] for e in d.events("drain.deleted")] == ["default/db-0"]
    assert "db-0" not in kube.pod_names(NODE)


def test_the_reclaim_escalation_order_carries_the_source(kube, loop):
    """The order's source reaches the node: what a verifier-escalated reclaim writes."""
    o = order("r-9", "reclaim", 40, source="gcp", pdb_blocked="delete", level=EVICT_OVER)
    loop.until(lambda: names(kube, "r-9", "reclaim"), 20, "the condition", o)
    assert scheduled(kube)["message"].startswith("notice r-9 from gcp, deadline ")   # type: ignore[index]


def test_a_refused_condition_does_not_hold_the_drain(kube, drains):
    """An identity the server refuses nodes/status (403): the node is cordoned and emptied all the
    same, and drain.cordoned says the condition was refused."""
    kube.fault("status", pattern=rf"/nodes/{NODE}/status$", status=403)
    kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
    d = Drain(lambda: KubeApi(kube.url, NODE, timeout_s=2.0), make_spec(source="aws"))
    drains.append(d)
    d.wait_state("done")
    (ev,) = d.events("drain.cordoned")
    assert ev["condition"] == "" and ev["condition_patched"] is False and ev["condition_refused"]
    assert ev["tainted"] is True and kube.node(NODE)["spec"]["unschedulable"] is True
    assert scheduled(kube) is None
