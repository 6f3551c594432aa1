"""bench.fleet_model's mechanics (issue 27, point 6): APF's seats, shuffle sharding and fair
queuing, the shared core, and the drains built on them."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from bench.fleet_model import (
    CONTROLLER_BURST,
    CONTROLLER_QPS_1_20,
    LEVELS_1_20,
    PODS,
    Costs,
    Hall,
    Level,
    PriorityLevel,
    Request,
    Server,
    compare,
    fit_costs,
    hand,
    seats_of,
    simulate,
)


def _req(flow: str, level: str = "a", cost: float = 0.01) -> Request:
    return Request(flow, level, cost, "x", -1)


def test_each_level_gets_its_share_of_the_server_concurrency_rounded_up():
    seats = seats_of(LEVELS_1_20)
    total_shares = sum(lv.shares for lv in LEVELS_1_20)
    assert seats["sco-agent"] == math.ceil(600 * 40 / total_shares)
    assert seats["system"] == math.ceil(600 * 30 / total_shares)
    assert seats["exempt"] > 10_000


def test_shuffle_sharding_deals_each_flow_a_stable_hand_of_distinct_queues():
    h = hand("system:node:n1", 128, 6)
    assert h == hand("system:node:n1", 128, 6) and len(set(h)) == 6 and all(0 <= q < 128 for q in h)
    assert hand("system:node:n2", 128, 6) != h


def test_a_request_joins_the_shortest_queue_of_its_hand_and_is_rejected_when_that_one_is_full():
    level = PriorityLevel(Level("a", 10, queues=4, hand_size=2, queue_length_limit=3), seats=0)
    accepted = [level.enqueue(_req("f")) for _ in range(8)]
    assert accepted == [True] * 6 + [False] * 2          # two queues of 3, then full
    assert level.rejected == 2 and level.waiting == 6
    used = [i for i, q in enumerate(level.queues) if q.requests]
    assert sorted(used) == sorted(hand("f", 4, 2))


def test_fair_queuing_splits_the_seats_between_flows_whatever_each_one_sends():
    level = PriorityLevel(Level("a", 10, queues=64, hand_size=1, queue_length_limit=1000), seats=10)
    flows = [f for f in (f"user{i}" for i in range(200)) if hand(f, 64, 1) != hand("heavy", 64, 1)]
    light = flows[0]
    for _ in range(500):
        level.enqueue(_req("heavy"))
    for _ in range(5):
        level.enqueue(_req(light))
    order = []
    while (r := level.dispatch()) is not None:      # no seat freed: the first 10 dispatched
        order.append(r.flow)
        level.finish(r)
        if len(order) == 12:
            break
    # The light flow's five are not behind the heavy flow's 500: they alternate.
    assert order[:10].count(light) == 5


def test_a_single_flow_saturates_the_core_and_no_request_is_lost():
    server = Server((Level("a", 10, queues=8, hand_size=2, queue_length_limit=10_000),), core_share=1.0,
                    total_seats=5)
    sent = 1000
    for _ in range(sent):
        assert server.admit(_req("only", cost=0.01), 0.0)
    done = []
    t = 0.0
    while (nxt := server.next_done()) is not None:
        t = nxt
        done += server.complete(t)
    assert len(done) == sent and server.served == sent
    assert t == pytest.approx(sent * 0.01)            # one core, busy all along: 1,000 x 10 ms
    assert server.busy_s == pytest.approx(t)


def test_running_requests_share_the_core():
    server = Server((Level("a", 10, queues=8, hand_size=2),), core_share=0.5, total_seats=10)
    server.admit(_req("f1", cost=0.1), 0.0)
    server.admit(_req("f2", cost=0.1), 0.0)
    # Two at once on half a core: each gets a quarter, both end at 0.4 s.
    assert server.next_done() == pytest.approx(0.4)
    assert len(server.complete(0.4)) == 2


def test_a_small_hall_drains_within_the_capacity_the_costs_give_and_every_pod_goes_once():
    costs = Costs(eviction=0.002, pod_gone=0.002, request=0.001, lease=0.001, core_share=1.0)
    res = simulate(Hall(20, 30.0, horizon_s=300.0), costs)
    assert res.time_to_drain_all_s is not None and res.share_on_time == 1.0
    assert res.pods_out_by_deadline == 20 * PODS
    # Not faster than the core allows: every pod costs 4 ms of server CPU at least.
    assert res.time_to_drain_all_s >= 20 * PODS * 0.004
    assert res.served <= res.sent and res.rejected == 0


def test_past_the_capacity_the_agents_out_by_the_deadline_match_the_capacity_and_the_leases_still_pass():
    costs = Costs(eviction=0.005, pod_gone=0.005, request=0.002, lease=0.002, core_share=1.0)
    res = simulate(Hall(200, 30.0, horizon_s=200.0), costs)
    capacity = 1 / 0.010                                    # pods/s the core can carry (plus the requests)
    assert res.pods_out_by_deadline <= capacity * 30.0
    assert res.pods_out_by_deadline >= 0.6 * capacity * 30.0
    assert res.lease_failures == 0 and res.lease_p99_ms is not None


def test_the_central_peer_is_held_to_its_token_bucket():
    costs = Costs(eviction=0.001, pod_gone=0.001, request=0.001, lease=0.001, core_share=1.0)
    res = simulate(Hall(50, 30.0, "central", qps=5.0, burst=10, horizon_s=60.0, leases=False), costs)
    assert res.sent - res.pods_out <= 10 + 5.0 * 60.0 + 1   # its own (less the control plane's, one per pod)
    assert res.sent - res.pods_out >= 5.0 * 60.0 * 0.9      # and it used them
    assert res.time_to_drain_all_s is None


def _row(pods: int, per_pod_requests: float, leases: int, cpu: float) -> dict[str, Any]:
    return {"label": f"agents {pods}", "drainer": "agents", "nodes": pods // PODS, "pods": pods, "deadline_s": 30.0,
            "pods_out": pods, "pods_out_by_deadline_share": 1.0, "time_to_drain_all_s": 12.0, "ran_s": 12.0,
            "evictions_per_s": pods / 12.0, "requests_per_pod": per_pod_requests,
            "lease": {"p99_ms": 50.0, "renewals": leases},
            "cpu_s": {"kube-apiserver": cpu * 0.8, "etcd": cpu * 0.2, "others_on_machine": 9.0},
            "load": {"wall_s": 12.0, "server_core_others_s": 6.0}, "agent_cpu_s_per_pod": 0.01}


def test_the_fit_recovers_the_per_pod_and_per_request_costs_the_rows_were_made_with_and_compare_reads_a_row():
    per_pod, per_req = 0.012, 0.003
    rows = [_row(pods, rpp, leases, per_pod * pods + per_req * ((rpp - 1) * pods + leases))
            for pods, rpp, leases in ((300, 1.3, 12), (1200, 2.0, 100), (3000, 1.1, 500), (600, 3.0, 40))]
    costs = fit_costs(rows)
    assert costs.eviction + costs.pod_gone == pytest.approx(per_pod, rel=1e-3)
    assert costs.request == pytest.approx(per_req, rel=1e-3) and costs.lease == costs.request
    assert costs.read == costs.request   # no row sent a read: nothing to tell its price apart
    assert costs.agent_cpu_per_pod == 0.01 and costs.core_share == 1.0
    side = compare(rows[0], costs)
    assert (side["server_core"], side["client_core"]) == (0.5, 0.75)   # what others left of each core
    assert side["evictions_per_s"]["measured"] == 25.0 and side["evictions_per_s"]["model"] is not None
    with pytest.raises(ValueError):
        fit_costs([])


def test_reads_by_name_are_priced_apart_from_other_requests_where_the_rows_tell_them_apart():
    per_pod, per_read, per_req = 0.008, 0.0004, 0.003
    rows = []
    for pods, rpp, leases, reads in ((300, 1.3, 12, 0), (1200, 3.0, 100, 2000), (3000, 1.1, 500, 0),
                                     (600, 4.0, 40, 1500), (900, 2.5, 60, 1000)):
        others = (rpp - 1) * pods - reads + leases
        row = _row(pods, rpp, leases, per_pod * pods + per_read * reads + per_req * others)
        rows.append(dict(row, agent_requests_by_kind={"eviction": pods, "pdbs.get": reads}))
    costs = fit_costs(rows)
    assert costs.eviction + costs.pod_gone == pytest.approx(per_pod, rel=1e-3)
    assert costs.read == pytest.approx(per_read, rel=1e-2)
    assert costs.request == pytest.approx(per_req, rel=1e-3)
    # The model's agents pay the read's price for their requests per pod, not a write's.
    cheap = simulate(Hall(50, 30.0, horizon_s=60.0, leases=False), replace(costs, agent_extra_per_pod=3.0))
    dear = simulate(Hall(50, 30.0, horizon_s=60.0, leases=False),
                    replace(costs, agent_extra_per_pod=3.0, read=costs.request * 10))
    assert cheap.extra["server_busy_s"] < dear.extra["server_busy_s"]


def test_the_agents_window_halves_on_apf_rejections_so_an_overloaded_level_rejects_far_less():
    small = tuple(Level("sco-agent", 40, queues=4, hand_size=2, queue_length_limit=5) if lv.name == "sco-agent" else lv
                  for lv in LEVELS_1_20)
    costs = Costs(eviction=0.003, pod_gone=0.003, request=0.001, lease=0.001, core_share=1.0)
    hall = Hall(100, 30.0, horizon_s=60.0, leases=False)
    fixed = simulate(Hall(100, 30.0, horizon_s=60.0, leases=False, aimd=False), costs, small)
    adaptive = simulate(hall, costs, small)
    assert fixed.rejected > 0
    assert adaptive.rejected < fixed.rejected / 2
    assert adaptive.pods_out_by_deadline >= 0.8 * fixed.pods_out_by_deadline   # and no less goes out


def test_a_row_replays_with_the_control_plane_turn_arounds_it_measured():
    """The fake kubelets and disruption controller share the bench's core with the drainers: a row
    that measured them slow is replayed with them slow (each PDB's room comes back later)."""
    costs = Costs(eviction=0.002, pod_gone=0.002, request=0.001, lease=0.001)
    row = _row(300, 1.3, 12, 5.0)
    quick = compare(row, costs)
    slow = compare(dict(row, control_plane={"kubelet_s": 1.5, "controller_s": 1.5}), costs)
    assert slow["control_plane"] == {"kubelet_s": 1.5, "controller_s": 1.5} and quick["control_plane"] is None
    assert slow["evictions_per_s"]["model"] < quick["evictions_per_s"]["model"]


def test_1_20_s_disruption_controller_writes_at_its_client_s_rate_and_each_write_gives_back_every_pod_it_saw():
    """One worker, 20 requests a second (burst 30): room comes back only as fast as it writes, a write
    answers every pod gone under that PDB since its sync began, and no pod is lost or evicted twice."""
    costs = Costs(eviction=0.0005, pod_gone=0.0005, request=0.0005, lease=0.0005, core_share=1.0)
    hall = Hall(100, 30.0, horizon_s=600.0, leases=False)
    bench = simulate(hall, costs)
    real = simulate(replace(hall, controller_qps=CONTROLLER_QPS_1_20), costs)
    assert real.pods_out == bench.pods_out == 100 * PODS             # every pod goes, once
    assert real.time_to_drain_all_s is not None and bench.time_to_drain_all_s is not None
    writes = real.extra["pdb_status_writes"]
    assert writes <= CONTROLLER_BURST + CONTROLLER_QPS_1_20 * real.time_to_drain_all_s + 1
    assert writes < real.pods_out                                     # coalesced: one write answers many pods
    # The server here is fast: the controller is what holds the drain back.
    assert real.time_to_drain_all_s > 2 * bench.time_to_drain_all_s


def test_1_20_s_controller_frees_the_central_peer_s_room_without_starting_agents():
    costs = Costs(eviction=0.001, pod_gone=0.001, request=0.001, lease=0.001, core_share=1.0)
    res = simulate(Hall(10, 30.0, "central", qps=50.0, burst=100, horizon_s=600.0, leases=False,
                        controller_qps=CONTROLLER_QPS_1_20), costs)
    assert res.pods_out == 10 * PODS and res.time_to_drain_all_s is not None
    assert res.extra["pdb_status_writes"] > 0


def test_the_agents_requests_a_node_before_their_evictions_and_a_pod_after_are_counted_by_kind():
    """Not fitted: a least-squares split of the rows' requests into a part a node and a part a pod
    gave 1 to 6 requests a node on round 10 and 11's runs, where every drain sent 9 before its first
    eviction."""
    per_pod, per_read, per_req = 0.008, 0.0004, 0.003
    ideal = dict(_row(3000, 1.0, 200, per_pod * 3000 + per_req * 200), drainer="ideal", label="ideal probe")
    rows = [ideal]
    for pods, leases, reads, nodes in ((3300, 220, 500, 110), (6600, 440, 3000, 220), (2100, 880, 40, 440)):
        kinds = {"eviction": pods, "pdbs.get": reads, "eviction -> 429": 7, "pods.list.not_older_than": nodes,
                 "node.get": nodes, "node.patch": 2 * nodes, "node.patch.status": nodes, "GET /api/v1": nodes,
                 "pods.list.cache": nodes, "pods.watch": nodes, "pdbs.list": nodes, "pdbs.watch -> 0": nodes}
        others = sum(kinds.values()) - pods - reads + leases
        row = dict(_row(pods, sum(kinds.values()) / pods, leases, per_pod * pods + per_read * reads + per_req * others),
                   nodes=nodes, agent_requests_by_kind=kinds)
        rows.append(row)
    costs = fit_costs(rows)
    assert costs.eviction + costs.pod_gone == pytest.approx(per_pod, rel=1e-3)
    assert costs.read == pytest.approx(per_read, rel=1e-2) and costs.request == pytest.approx(per_req, rel=1e-3)
    assert costs.agent_setup == 9                        # 9 setup requests a node, an unanswered one included
    # Further requests a pod: reads, the refused evictions and the confirmations; the rows' median.
    assert costs.agent_extra_per_pod == pytest.approx((40 + 7 + 440) / 2100, abs=1e-3)
