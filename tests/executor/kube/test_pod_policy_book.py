"""Each pod's own policy in the eviction book (pure): skipped pods leave the plan, held pods
count but are not sent before their time, and every such pod is announced once."""
from __future__ import annotations

from common.pod_policy import Rules
from executor.kube.book_records import Inputs
from executor.kube.eviction_book import EvictionBook
from tests.executor.kube.podspecs import pod
from tests.executor.kube.test_eviction_book import T0, D, names, uid
from tests.support.clocks import at

DEADLINE = T0 + 100


def annotated(name, value, **kw):
    p = pod(name, owner=("ReplicaSet", name), **kw)
    p["metadata"]["annotations"] = {"sco.io/drain": value}
    return p


def book(pods, kind, **rules):
    b = EvictionBook(D, T0, "report", rules=Rules(kind, DEADLINE, 50, **rules))
    b.observe(list(pods), [])
    return b


def events(b, now, inputs=None):
    actions, emits = b.next_actions(at(now), inputs or Inputs(), 8)
    return names(actions), [(e.event, e.data["pod"].split("/")[1]) for e in emits]


def test_on_a_rebalance_a_skip_pod_stays_uncounted_and_is_said_once():
    b = book([annotated("keep", "skip"), pod("web", owner=("ReplicaSet", "web"))], "rebalance")
    assert b.remaining() == ["default/web"]
    sent, said = events(b, T0)
    assert sent == ["web"] and said == [("drain.pod_skipped", "keep")]
    assert events(b, T0 + 1) == ([], [])
    b.observe([annotated("keep", "skip")], [])
    assert b.empty()                       # "done" does not wait for it


def test_on_a_maintenance_wait_completed_counts_and_is_never_sent():
    b = book([annotated("batch", "wait-completed")], "maintenance")
    sent, said = events(b, T0)
    assert sent == [] and said == [("drain.pod_held", "batch")]
    assert b.remaining() == ["default/batch"]
    assert events(b, D.evict_at + 1, Inputs(escalated=True))[0] == []   # not even past the cutoff
    b.observe([], [])                      # it completed
    assert b.empty()


def test_a_held_pod_does_not_keep_the_critical_tier_waiting():
    dns = pod("dns", ns="kube-system", owner=("ReplicaSet", "dns"), priority_class="system-node-critical")
    b = book([annotated("batch", "wait-completed"), dns], "rebalance")
    assert events(b, T0)[0] == ["dns"]


def test_on_a_reclaim_skip_holds_until_deadline_minus_its_grace_then_goes():
    b = book([annotated("keep", "skip", grace=20), pod("web", owner=("ReplicaSet", "web"))], "reclaim")
    sent, said = events(b, T0)
    assert sent == ["web"] and said == [("drain.pod_held", "keep")]
    assert b.remaining() == ["default/keep", "default/web"]
    assert events(b, DEADLINE - 20.01, Inputs(escalated=True))[0] == []   # the cutoff does not release it
    assert events(b, DEADLINE - 20)[0] == ["keep"]


def test_on_a_reclaim_a_pod_kubectl_refuses_goes_at_once_and_the_loss_is_said():
    lonely = pod("lonely")                 # no controller
    scratch = pod("scratch", owner=("ReplicaSet", "s"))
    scratch["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    b = book([lonely, scratch], "reclaim")
    actions, emits = b.next_actions(at(T0), Inputs(), 8)
    assert sorted(names(actions)) == ["lonely", "scratch"]
    assert {e.event for e in emits} == {"drain.pod_data_lost"}
    assert {e.data["pod"]: e.data["lost"] for e in emits} == {
        "default/lonely": ["unreplicated: no controller recreates it"], "default/scratch": ["emptyDir:tmp"]}


def test_on_a_rebalance_pods_kubectl_refuses_are_kept_unless_the_contract_says_as_kubectl_flags_do():
    lonely = pod("lonely")
    assert events(book([lonely], "rebalance"), T0)[0] == []
    assert events(book([lonely], "rebalance", force=True), T0)[0] == ["lonely"]


def test_without_rules_every_pod_moves_as_before():
    b = EvictionBook(D, T0, "report")
    b.observe([annotated("keep", "skip")], [])
    assert names(b.next_actions(at(T0), Inputs(), 8)[0]) == ["keep"]
    assert uid("keep") in b.plan.targets


def test_a_dry_run_lists_what_each_pods_policy_would_do():
    from executor.kube.drain_plan import dry_run_steps

    pods = [annotated("keep", "skip"), annotated("batch", "wait-completed"), pod("web", owner=("ReplicaSet", "w"))]
    steps = dry_run_steps(pods, None, T0, D, frozenset(), False, rules=Rules("maintenance", DEADLINE, 50))
    assert [(s["pod"], s.get("policy"), s.get("skipped")) for s in steps] == [
        ("default/batch", "wish:wait-completed", None), ("default/web", None, None), ("default/keep", None, "wish:skip")]
    assert steps[0]["grace_s"] is None and steps[0]["until"] is None   # never sent by this drain
