"""How the drain paces itself against the API-server emulator: the PDB gate under a lagging watch,
the cordon before the hall spread, and the eviction concurrency under throttling (issue 27)."""
from __future__ import annotations

from executor.kube import pacing
from executor.kube.api import KubeApi
from tests.executor.kube.harness import NODE, OTHER, Drain, make_spec

PDBS = "poddisruptionbudgets"


def start(kube, drains, **kw) -> Drain:
    d = Drain(lambda: KubeApi(kube.url, NODE, timeout_s=2.0), make_spec(**kw))
    drains.append(d)
    return d


def refusals(kube) -> list[str]:
    return [name for _, name, status in kube.evictions() if status == 429]


def test_a_pdb_watch_40_s_behind_costs_no_refusal_and_the_drain_completes(kube, drains):
    """The PDB's watch trails the server by 40 s. web-0's eviction takes the budget's one
    disruption; its replacement is Ready only 32 s later, so until then the server refuses
    web-1. Every status the watch delivers before t+40 s predates the eviction and shows room:
    the gate must keep counting web-0's eviction until the watch shows its write (a 30 s timer
    would let web-1 go at t+30 s, into the server's refusals). Slow by nature: ~75 s."""
    kube.add_pdb("web", {"app": "web"}, max_unavailable=1)
    for name, node in (("web-0", NODE), ("web-1", NODE), ("web-2", OTHER)):
        kube.add_pod(name, node, owner=("ReplicaSet", "web"), labels={"app": "web"})
    kube.set_options(start_delay=32.0, watch_lag={PDBS: 40.0})
    d = start(kube, drains, deadline_in=170.0, evict_s=150.0, margin_s=5.0)
    d.wait_state("done", timeout=140.0)
    assert refusals(kube) == []
    assert [(name, status) for _, name, status in kube.evictions()] == [("web-0", 201), ("web-1", 201)]


def test_the_cordon_goes_at_once_and_the_evictions_start_at_the_node_s_slot_of_the_spread(kube, drains):
    """The hall spread sits between the cordon and the first eviction, never before the cordon:
    a cordon is one small PATCH per node and the write that stops new pods landing."""
    kube.add_pod("app-1", NODE)
    kube.add_pod("app-2", NODE)
    spread_s = 8.0 / pacing.eviction_spread_delay(NODE, 1.0)   # this node's slot: 8 s
    d = start(kube, drains, write_spread_s=spread_s)
    kube.wait_until(lambda: kube.node(NODE)["spec"].get("unschedulable"), timeout=4.0)
    assert kube.evictions() == []                                # the evictions wait for the slot
    d.wait_state("done", timeout=40.0)
    writes = [e for e in kube.requests() if e["method"] in ("PATCH", "POST", "DELETE")]
    assert writes[0]["method"] == "PATCH" and writes[0]["path"] == f"/api/v1/nodes/{NODE}"
    first_eviction = next(e for e in writes if e["path"].endswith("/eviction"))
    assert first_eviction["time"] - writes[0]["time"] >= 8.0 - 0.5   # started at its slot, not before


def test_under_apf_the_evictions_in_flight_shrink_to_what_the_server_admits(kube, drains):
    """The server's priority level has 2 seats and no queue: a third request at once is rejected
    with APF's 429. Eight evictions in flight (the workers) meet rejection after rejection, each
    holding the drain for Retry-After (without the limit this drain does not finish in 90 s); the
    drain adapts its concurrency instead (pacing.ConcurrencyLimit), so the eviction requests per
    drained pod stay bounded near one, and the node is emptied."""
    pods = [f"app-{i:02d}" for i in range(40)]
    for name in pods:
        kube.add_pod(name, NODE)
    kube.set_options(apf_seats=2, apf_queue=0, apf_service_s=0.2)
    d = start(kube, drains, deadline_in=120.0, evict_s=100.0)
    d.wait_state("done", timeout=90.0)
    sent = kube.evictions()
    assert sorted(name for _, name, status in sent if status == 201) == pods
    throttled = [name for _, name, status in sent if status == 429]
    assert refusals(kube) == throttled                   # every 429 here is APF's, none a PDB's
    assert len(sent) / len(pods) <= 1.75, f"{len(sent)} eviction requests for {len(pods)} pods"
