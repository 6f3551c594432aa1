"""bench.fleet's pure parts (issue 27, point 4): scenarios sized by overload factor against the
measured capacity, the headline figures, the exit status rule, the ideal drainer's PDB pacing and
the kubelet leases' summary."""
from __future__ import annotations

from typing import Any

import pytest

from bench.fleet_ideal import IdealPacer
from bench.fleet_lease import Attempt, summary
from bench.fleet_plan import (
    PROBE,
    PROBE_END,
    Scenario,
    after_probe,
    exit_status,
    goodput,
    headline,
    nodes_for,
    overload,
    plan,
)


def test_a_scenario_has_as_many_nodes_as_its_overload_factor_asks_of_the_capacity():
    # 60 evictions/s x 30 s = 1,800 pods = 60 nodes of 30 at 1x; 120 at 2x; 240 at 4x.
    assert [nodes_for(f, 30.0, 60.0) for f in (1, 2, 4)] == [60, 120, 240]
    assert nodes_for(4, 120.0, 60.0) == 960
    assert nodes_for(1, 30.0, 61.5) == 62                 # whole nodes, at least the factor
    assert overload(62, 30.0, 61.5) >= 1.0
    assert nodes_for(4, 120.0, 60.0, max_nodes=500) == 500   # capped: the row's factor says the lower one
    assert overload(500, 120.0, 60.0) == pytest.approx(500 * 30 / 120 / 60)
    with pytest.raises(ValueError):
        nodes_for(1, 30.0, 0.0)


def test_the_plan_runs_the_agents_at_every_deadline_and_factor_and_the_peers_beside_the_smallest():
    scenarios = plan(50.0, [30.0, 120.0], [1.0, 2.0, 4.0], ["central", "central50", "kubectl"])
    agents = [s for s in scenarios if s.drainer == "agents"]
    assert [(s.deadline_s, s.factor, s.nodes) for s in agents] == [
        (30.0, 1.0, 50), (30.0, 2.0, 100), (30.0, 4.0, 200), (120.0, 1.0, 200), (120.0, 2.0, 400), (120.0, 4.0, 800)]
    peers = [s for s in scenarios if s.drainer != "agents"]
    assert [(s.drainer, s.nodes, s.deadline_s) for s in peers] == [
        ("central", 50, 30.0), ("central50", 50, 30.0), ("kubectl", 50, 30.0)]
    assert len({s.label for s in scenarios}) == len(scenarios)
    with pytest.raises(ValueError):
        plan(50.0, [30.0], [1.0], ["nobody"])


def _row(label: str, drainer: str, nodes: int, **kw: Any) -> dict[str, Any]:
    row = {"label": label, "drainer": drainer, "nodes": nodes, "pods": nodes * 30, "deadline_s": 30.0,
           "pods_out_by_deadline": nodes * 30, "pods_out_by_deadline_share": 1.0, "share_on_time": 1.0,
           "p99_s": 20.0, "time_to_drain_all_s": 20.0, "ran_s": 20.0, "requests_per_pod": 1.5,
           "refusals": {"http_429": 0, "apf": 0, "pdb": 0}, "lease": {"p99_ms": 40.0, "failures": 0},
           "agent_cpu_s_per_pod": 0.01, "notice_to_cordon_p99_ms": 30.0, "completed": True}
    row.update(kw)
    return row


def test_goodput_is_what_went_out_by_the_deadline_over_the_deadline_or_all_over_the_time_to_drain_all():
    assert goodput(_row("a", "agents", 10, time_to_drain_all_s=20.0)) == 300 / 20.0
    late = _row("b", "agents", 10, time_to_drain_all_s=None, pods_out_by_deadline=150)
    assert goodput(late) == 150 / 30.0
    slow = _row("c", "agents", 10, time_to_drain_all_s=45.0, pods_out_by_deadline=200)
    assert goodput(slow) == 200 / 30.0


def test_the_headline_holds_every_key_of_the_issue_and_the_peers_as_ratios_of_time_to_drain_all():
    rows = [_row("ideal probe", "ideal", 40, pods_out=1200, cpu_s={"kube-apiserver": 10.0, "etcd": 2.0}),
            _row("agents 30s x1", "agents", 20, time_to_drain_all_s=25.0, pods_out=600,
                 cpu_s={"kube-apiserver": 10.0, "etcd": 2.0}),
            _row("agents 30s x2", "agents", 40, time_to_drain_all_s=None, pods_out_by_deadline=900,
                 pods_out_by_deadline_share=0.75, share_on_time=0.1, p99_s=None, ran_s=60.0),
            _row("central 30s x1", "central", 20, time_to_drain_all_s=None, ran_s=90.0, share_on_time=0.0),
            _row("kubectl 30s x1", "kubectl", 20, time_to_drain_all_s=50.0),
            {"label": "central50 30s x1", "drainer": "central50", "nodes": 20, "error": "RuntimeError: boom"}]
    h = headline(rows, capacity_eps=40.0)
    for key in ("goodput_over_capacity", "pods_out_by_deadline_share", "share_on_time", "p99_s",
                "lease_renew_p99_ms", "agent_cpu_s_per_pod", "requests_per_pod", "refusals"):
        assert key in h
    assert h["goodput_over_capacity"] == {"agents 30s x1": round(600 / 25.0 / 40.0, 3),
                                          "agents 30s x2": round(900 / 30.0 / 40.0, 3)}
    assert h["pods_out_by_deadline_share"]["agents 30s x2"] == 0.75
    assert "ideal probe" not in h["share_on_time"]
    ratios = h["time_to_drain_all_peer_over_agents"]
    assert ratios["kubectl"]["ratio"] == 2.0 and ratios["kubectl"]["bound"] is None
    assert ratios["central"]["ratio"] == round(90.0 / 25.0, 2) and ratios["central"]["bound"] == "lower"
    assert "central50" not in ratios and h["failed"] == ["central50 30s x1"]
    # 600 pods for 12 CPU s against the ideal's 1,200: twice the server's CPU per pod.
    assert h["server_cpu_per_pod_over_ideal"] == {"agents 30s x1": 2.0, "agents 30s x2": None}
    assert h["notice_to_cordon_p99_ms"] == {"agents 30s x1": 30.0, "agents 30s x2": 30.0}


def test_a_run_that_probed_the_capacity_probes_it_again_after_the_last_scenario():
    scenarios = plan(50.0, [30.0], [1.0, 2.0], ["central"])
    after = after_probe(scenarios, 100, probed=True)
    assert [s.label for s in after] == [s.label for s in scenarios] + [PROBE_END]
    assert (after[-1].drainer, after[-1].nodes) == ("ideal", 100)
    assert after_probe(scenarios, 100, probed=False) == scenarios     # --capacity given: nothing to compare


def test_each_goodput_is_also_read_against_both_capacity_probes():
    rows = [_row(PROBE, "ideal", 40, evictions_per_s=40.0),
            _row("agents 30s x1", "agents", 20, time_to_drain_all_s=25.0),
            _row("agents 30s x2", "agents", 40, time_to_drain_all_s=None, pods_out_by_deadline=900),
            _row(PROBE_END, "ideal", 40, evictions_per_s=30.0)]
    h = headline(rows, capacity_eps=40.0)
    assert h["capacity_probes_evictions_per_s"] == {PROBE: 40.0, PROBE_END: 30.0}
    # 24 and 30 evictions/s: over the start probe (the scenarios' sizing) and over [best, worst].
    assert h["goodput_over_capacity"] == {"agents 30s x1": 0.6, "agents 30s x2": 0.75}
    assert h["goodput_over_capacity_range"] == {"agents 30s x1": [0.6, 0.8], "agents 30s x2": [0.75, 1.0]}
    assert "ideal probe (end)" not in h["share_on_time"]
    one = headline(rows[:3], capacity_eps=40.0)       # one probe: no range to give
    assert one["goodput_over_capacity_range"] == {} and one["capacity_probes_evictions_per_s"] == {PROBE: 40.0}
    failed = headline(rows[:3] + [_row(PROBE_END, "ideal", 40, evictions_per_s=10.0, completed=False)], 40.0)
    assert failed["goodput_over_capacity_range"] == {}               # a probe that did not drain all is no capacity


def test_the_exit_status_is_non_zero_only_when_a_scenario_could_not_run_to_its_end():
    asked = [Scenario("agents 30s x1", "agents", 20, 30.0, 1.0, 90.0),
             Scenario("agents 30s x2", "agents", 40, 30.0, 2.0, 90.0)]
    missed_goals = [_row("agents 30s x1", "agents", 20, share_on_time=0.0, time_to_drain_all_s=None),
                    _row("agents 30s x2", "agents", 40, pods_out_by_deadline_share=0.1)]
    assert exit_status(asked, missed_goals, 40.0) == 0             # the figures say the goal is missed
    failed = [missed_goals[0], {"label": "agents 30s x2", "drainer": "agents", "nodes": 40, "error": "x"}]
    assert exit_status(asked, failed, 40.0) == 1
    assert exit_status(asked, missed_goals[:1], 40.0) == 1          # one never ran
    incomplete = [missed_goals[0], _row("agents 30s x2", "agents", 40, completed=False)]
    assert exit_status(asked, incomplete, 40.0) == 1                # a worker did not report
    assert exit_status(asked, missed_goals, None) == 1              # no capacity: nothing was sized by it


def test_the_ideal_pacer_sends_only_the_watched_room_and_counts_an_accepted_eviction_until_a_status_lists_it():
    pacer = IdealPacer({"ns/app-0": [f"p{i}" for i in range(10)]})
    assert pacer.take() == []                                       # no status seen yet: no room known
    pacer.status("ns/app-0", {"disruptionsAllowed": 5})
    first = pacer.take()
    assert len(first) == 5 and pacer.take() == []                  # exactly the room, no more
    for _, pod in first:
        pacer.answered("ns/app-0", pod, 201)
    # A lagging status (before the evictions' writes) still shows the room: nothing more goes out.
    pacer.status("ns/app-0", {"disruptionsAllowed": 5})
    assert pacer.take() == []
    # The eviction's own write lists the pods and takes the room; the controller's later write gives it back.
    pacer.status("ns/app-0", {"disruptionsAllowed": 0, "disruptedPods": {p: "t" for _, p in first}})
    assert pacer.take() == []
    pacer.status("ns/app-0", {"disruptionsAllowed": 5})
    second = pacer.take()
    assert len(second) == 5 and not {p for _, p in second} & {p for _, p in first}
    pacer.answered("ns/app-0", second[0][1], 429)                  # refused: counted, and sent again later
    assert pacer.refused == 1 and not pacer.done()
    assert pacer.take() == [second[0]]


def test_the_lease_summary_reports_latency_failures_and_the_longest_gap_inside_the_window():
    attempts = [Attempt("n1", 100.0 + 10 * k, 0.010 * (k + 1), 200, 0.0) for k in range(10)]
    attempts += [Attempt("n2", 105.0, 2.0, 0, 1.0), Attempt("n2", 106.0, 0.05, 200, 0.0),
                 Attempt("n2", 130.0, 0.05, 200, 0.0), Attempt("n3", 50.0, 0.01, 200, 0.0)]
    s = summary(attempts, 100.0, 160.0)
    assert s["renewals"] == 7 + 3                                   # n1's 100..160, n2's three; not n3's at 50
    assert s["failures"] == 1
    assert s["p99_ms"] == 2000.0 and s["max_gap_s"] == 24.0


def test_the_ideal_pacer_can_hold_one_eviction_of_a_pdb_in_flight_at_a_time():
    pacer = IdealPacer({"ns/app-0": [f"p{i}" for i in range(10)]}, per_pdb=1)
    pacer.status("ns/app-0", {"disruptionsAllowed": 5})
    first = pacer.take()
    assert len(first) == 1 and pacer.take() == []
    pacer.answered("ns/app-0", first[0][1], 201)     # answered: the next may go, within the room
    assert len(pacer.take()) == 1
