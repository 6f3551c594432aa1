"""The drain plan: which pods move, in which tier and lane, and the contract's clock on it (grace periods)."""
from __future__ import annotations

import pytest

from common.wire import PhaseEnds
from executor.kube.drain_plan import (
    ApiHealth,
    down_after,
    drain_plan,
    dry_run_steps,
    fallback_due,
    grace_for,
    pdb_from_causes,
    selector_matches,
)
from tests.executor.kube.podspecs import pdb, pod


def lanes(plan):
    return [(lane.tier, lane.key, [plan.targets[u].key.split("/")[1] for u in lane.uids]) for lane in plan.lanes]


def test_daemonset_mirror_and_finished_pods_are_not_planned():
    pods = [pod("web"), pod("ds", owner=("DaemonSet", "agent")), pod("static", mirror=True),
            pod("job", phase="Succeeded"), pod("crashed", phase="Failed")]
    assert [t.key for t in drain_plan(pods, []).targets.values()] == ["default/web"]


def test_pods_under_one_pdb_share_a_lane_others_get_their_own():
    pods = [pod(f"web-{i}", labels={"app": "web"}) for i in range(3)] + [pod("a"), pod("b")]
    plan = drain_plan(pods, [pdb("web", {"app": "web"})])
    assert lanes(plan) == [(0, "pdb:default/web", ["web-0", "web-1", "web-2"]),
                           (0, "pod:default/a", ["a"]), (0, "pod:default/b", ["b"])]
    assert plan.targets["uid-default-web-1"].pdb == "default/web"


def test_a_pdb_only_covers_its_own_namespace():
    plan = drain_plan([pod("web", ns="other", labels={"app": "web"})], [pdb("web", {"app": "web"})])
    assert lanes(plan) == [(0, "pod:other/web", ["web"])]


def test_system_critical_pods_are_the_last_tier():
    pods = [pod("dns", ns="kube-system", priority_class="system-cluster-critical"),
            pod("proxy", ns="kube-system", priority=2_000_001_000), pod("app", priority=1000)]
    assert lanes(drain_plan(pods, [])) == [(0, "pod:default/app", ["app"]),
                                           (1, "pod:kube-system/dns", ["dns"]),
                                           (1, "pod:kube-system/proxy", ["proxy"])]


def test_without_readable_pdbs_the_pods_of_one_controller_share_a_lane():
    pods = [pod("web-1", owner=("ReplicaSet", "web")), pod("web-2", owner=("ReplicaSet", "web")), pod("solo")]
    assert lanes(drain_plan(pods, None)) == [(0, "owner:owner-web", ["web-1", "web-2"]),
                                             (0, "pod:default/solo", ["solo"])]


@pytest.mark.parametrize(("selector", "labels", "matches"), [
    ({"matchLabels": {"app": "web"}}, {"app": "web", "x": "y"}, True),
    ({"matchLabels": {"app": "web"}}, {"app": "db"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}, {"tier": "b"}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}, {"tier": "a"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "Bogus"}]}, {"tier": "a"}, False),
    (None, {"app": "web"}, False),
])
def test_label_selectors(selector, labels, matches):
    assert selector_matches(selector, labels) is matches


def test_grace_is_capped_so_the_pod_ends_before_the_cutoff_but_never_forced():
    assert grace_for(30, now=100.0, cutoff=200.0) is None      # its own grace fits
    assert grace_for(30, now=100.0, cutoff=112.5) == 12
    assert grace_for(30, now=100.0, cutoff=100.5) == 1         # 0 would be a forced delete
    assert grace_for(30, now=100.0, cutoff=50.0) == 1


def test_the_pdb_is_read_from_a_429_cause():
    assert pdb_from_causes(["The disruption budget web-pdb needs 2 healthy pods and has 2 currently"]) == "web-pdb"
    assert pdb_from_causes(["something else"]) == ""


def test_the_api_server_is_down_after_three_unanswered_calls_spanning_the_bound():
    h = ApiHealth()
    h.failed(0.0)
    h.failed(5.0)
    assert not h.down(5.0, 2.0)                  # long enough, but only two calls
    h.failed(5.5)
    assert h.down(5.5, 2.0)
    h.ok()
    h.failed(6.0)
    h.failed(6.1)
    h.failed(6.2)
    assert not h.down(6.2, 2.0)                  # three calls, but only 0.2 s
    assert h.down(8.0, 2.0)


def test_down_after_is_bounded_by_the_contract():
    assert down_after(10) == 2.5
    assert down_after(600) == 10.0
    assert down_after(0) == 0.5


# -- going around the server: only when every condition holds (issue 16) ------------------------

DUE = {"down": True, "allowed": True, "dry_run": False, "done": False, "now": 50.0, "at": 48.0}


def test_fallback_is_due_only_when_every_condition_holds():
    assert fallback_due(**DUE)
    for change in ({"down": False}, {"allowed": False}, {"dry_run": True}, {"done": True}, {"now": 47.9}):
        assert not fallback_due(**{**DUE, **change}), change


def test_dry_run_steps_list_each_pod_in_order_with_its_grace_and_phase():
    ends = PhaseEnds(checkpoint_by=20.0, evict_at=40.0, cutoff=55.0)
    pods = [pod("web", grace=30), pod("dns", ns="kube-system", priority_class="system-node-critical"),
            pod("job", grace=120), pod("ds", owner=("DaemonSet", "agent"))]
    steps = dry_run_steps(pods, None, 10.0, ends, held=frozenset({"uid-default-job"}), hold_all=False)
    assert [(s["pod"], s["phase"], s["tier"], s["grace_s"]) for s in steps] == [
        ("default/job", "checkpoint", 0, 35),    # held until checkpoint_by, then what is left to the cutoff
        ("default/web", "evict", 0, 30),         # its own grace fits
        ("kube-system/dns", "evict", 1, 30)]     # critical last; the DaemonSet pod does not count


def test_the_next_turn_is_an_idle_second_away_or_the_next_phase_end_before_it():
    from common.wire import PhaseEnds
    from executor.kube.drain_plan import next_turn
    from tests.support.clocks import at
    ends = PhaseEnds(checkpoint_by=10.0, evict_at=20.0, cutoff=25.0)
    assert next_turn(at(0.0), 1.0, ends, 60.0) == 1.0
    assert next_turn(at(9.5), 1.0, ends, 60.0) == 10.0
    assert next_turn(at(24.8), 1.0, ends, 60.0) == 25.0
    assert next_turn(at(59.9), 1.0, ends, 60.0) == 60.0
    assert next_turn(at(70.0), 1.0, ends, 60.0) == 71.0
    # The answer is on the monotonic clock: the wall clock 60 s behind it changes nothing but which
    # phase end is next.
    assert next_turn(at(9.5, 500.0), 1.0, ends, 60.0) == 500.5
