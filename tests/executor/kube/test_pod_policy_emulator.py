"""Each pod's own policy, and the pods kubectl refuses, in the drain runner against the
API-server emulator (threads, HTTP, the watch)."""
from __future__ import annotations

import time

from common.pod_policy import Rules
from executor.kube.api import KubeApi
from executor.scheduler import Remaining
from tests.executor.kube.harness import NODE, Drain, make_spec
from tests.support.wait import wait_for


def start(kube, drains, kind, deadline_in=60.0, evict_s=40.0, **local) -> Drain:
    spec = make_spec(kind=kind, deadline_in=deadline_in, evict_s=evict_s)
    spec = type(spec)(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__},
                         "pod_rules": Rules(kind, spec.deadline, evict_s, **local)})
    d = Drain(lambda: KubeApi(kube.url, NODE, timeout_s=1.0), spec)
    drains.append(d)
    return d


def evicted(kube) -> list[str]:
    return [name for _, name, status in kube.evictions() if status == 201]


def test_a_rebalance_leaves_a_skip_pod_and_is_done_without_it(kube, drains):
    kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
    kube.add_pod("keep", NODE, owner=("ReplicaSet", "keep"), annotations={"sco.io/drain": "skip"})
    kube.add_pod("karp", NODE, owner=("ReplicaSet", "karp"), annotations={"karpenter.sh/do-not-disrupt": "true"})
    d = start(kube, drains, "rebalance")
    d.wait_state("done")
    assert evicted(kube) == ["web"]
    assert kube.pod_names(NODE) == {"keep", "karp"}
    assert sorted(e["pod"] for e in d.events("drain.pod_skipped")) == ["default/karp", "default/keep"]
    assert [r.items for r in d.reports if isinstance(r, Remaining)][-1] == ()
    assert d.events("drain.node_empty")[0]["skipped"] == ["default/karp", "default/keep"]


def test_a_rebalance_keeps_and_reports_what_kubectl_refuses_and_waits_for_wait_completed(kube, drains):
    kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
    kube.add_pod("lonely", NODE)                                            # no controller
    kube.add_pod("scratch", NODE, owner=("ReplicaSet", "s"), empty_dir=True)
    kube.add_pod("batch", NODE, owner=("Job", "batch"), annotations={"sco.io/drain": "wait-completed"})
    d = start(kube, drains, "rebalance")
    wait_for(lambda: len(d.events("drain.pod_held")) == 3, 20, "three pods held")
    wait_for(lambda: "web" not in kube.pod_names(NODE), 20, "web gone")
    time.sleep(1.0)
    assert evicted(kube) == ["web"]
    held = {e["pod"]: e["reason"] for e in d.events("drain.pod_held")}
    assert held == {"default/lonely": "unreplicated", "default/scratch": "local_storage",
                    "default/batch": "wish:wait-completed"}
    assert [r.items for r in d.reports if isinstance(r, Remaining)][-1] == (
        "default/batch", "default/lonely", "default/scratch")      # they still count against "done"
    assert d.state() is None                                             # not done while they are there


def test_the_contract_lets_a_rebalance_evict_them_as_kubectls_flags_do(kube, drains):
    kube.add_pod("lonely", NODE)
    kube.add_pod("scratch", NODE, owner=("ReplicaSet", "s"), empty_dir=True)
    d = start(kube, drains, "maintenance", delete_emptydir_data=True, force=True)
    d.wait_state("done")
    assert sorted(evicted(kube)) == ["lonely", "scratch"]


def test_a_reclaim_evicts_what_kubectl_refuses_and_says_what_is_lost(kube, drains):
    kube.add_pod("lonely", NODE)
    kube.add_pod("scratch", NODE, owner=("ReplicaSet", "s"), empty_dir=True)
    d = start(kube, drains, "reclaim")
    d.wait_state("done")
    assert sorted(evicted(kube)) == ["lonely", "scratch"]
    lost = {e["pod"]: e["lost"] for e in d.events("drain.pod_data_lost")}
    assert lost == {"default/lonely": ["unreplicated: no controller recreates it"],
                    "default/scratch": ["emptyDir:scratch"]}


def test_a_reclaim_holds_a_skip_pod_until_deadline_minus_its_grace_then_evicts_it(kube, drains):
    kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
    kube.add_pod("keep", NODE, owner=("ReplicaSet", "keep"), grace=3, annotations={"sco.io/drain": "skip"})
    d = start(kube, drains, "reclaim", deadline_in=6.0, evict_s=4.0)
    d.wait_state("done", timeout=20)
    assert evicted(kube) == ["web", "keep"]
    times = {e["pod"]: e["since_received_ms"] for e in d.events("drain.evicted")}
    assert times["default/web"] < 1500
    assert times["default/keep"] >= 3000                                 # deadline - grace, not before
    [held] = d.events("drain.pod_held")
    assert held["reason"] == "wish:skip" and held["until"] is not None
