"""Per-pod drain policy with the whole agent (real supervisord, the emulated API server; DESIGN
section 9): a rebalance leaves a skip pod and both the executor and the verifier call the node
done without it; a reclaim holds a skip pod only until deadline - its grace, then evicts it."""
from __future__ import annotations

from common.timefmt import parse_rfc3339
from tests.support.stack import NODE, Stack
from tests.support.wait import wait_for


def evictions_of(s: Stack, notice_id: str, pod: str) -> list[dict]:
    return [e for e in s.events_of("drain.evicted", notice_id) if e["data"]["pod"] == f"default/{pod}"]


def test_a_rebalance_leaves_a_skip_pod_in_place_and_is_done_without_it(tmp_path):
    budget = {"budget_s": 30, "checkpoint_s": 2, "evict_s": 15, "margin_s": 5}
    with Stack(str(tmp_path), contract=budget, contract_extra={"kinds": {"rebalance": "drain"}}) as s:
        s.kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
        s.kube.add_pod("keep", NODE, owner=("ReplicaSet", "keep"), annotations={"sco.io/drain": "skip"})
        s.kube.add_pod("karp", NODE, owner=("ReplicaSet", "karp"),
                       annotations={"karpenter.sh/do-not-disrupt": "true"})
        doc = s.publish_notice(kind="rebalance", deadline_in=60)
        verdict = s.wait_event("drain.done", doc["id"], timeout=40)     # the verifier agrees: done
        assert verdict["notice_id"] == doc["id"]
        skipped = sorted(e["data"]["pod"] for e in s.events_of("drain.pod_skipped", doc["id"]))
        assert skipped == ["default/karp", "default/keep"]
        assert {n for _, n, _ in s.kube.evictions()} == {"web"}
        assert {"keep", "karp"} <= s.kube.pod_names(NODE) and "web" not in s.kube.pod_names(NODE)
        assert not s.events_of("drain.unverified", doc["id"]) and not s.events_of("drain.overrun", doc["id"])


def test_a_reclaim_evicts_a_skip_pod_at_deadline_minus_its_grace(tmp_path):
    budget = {"budget_s": 20, "checkpoint_s": 2, "evict_s": 10, "margin_s": 3}
    with Stack(str(tmp_path), contract=budget) as s:
        s.kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
        s.kube.add_pod("keep", NODE, owner=("ReplicaSet", "keep"), grace=8, terminate_after=1,
                       annotations={"sco.io/drain": "skip"})
        doc = s.publish_notice(kind="reclaim", deadline_in=20)
        deadline = parse_rfc3339(doc["deadline"])
        [held] = wait_for(lambda: s.events_of("drain.pod_held", doc["id"]), 20, "the skip pod held")
        assert held["data"]["reason"] == "wish:skip"
        assert parse_rfc3339(held["data"]["until"]) == deadline - 8
        [web] = wait_for(lambda: evictions_of(s, doc["id"], "web"), 20, "web evicted")
        [keep] = wait_for(lambda: evictions_of(s, doc["id"], "keep"), 30, "the skip pod evicted at its time")
        assert parse_rfc3339(web["ts"]) < deadline - 10                  # at once
        assert parse_rfc3339(keep["ts"]) >= deadline - 8 - 0.001         # not before deadline - grace
        assert parse_rfc3339(keep["ts"]) < deadline                      # but before the machine goes
        s.wait_event("drain.done", doc["id"], timeout=20)



def _refused_pods(s: Stack) -> None:
    s.kube.add_pod("web", NODE, owner=("ReplicaSet", "web"))
    s.kube.add_pod("lonely", NODE)                                                  # no controller
    s.kube.add_pod("scratch", NODE, owner=("ReplicaSet", "scratch"), empty_dir=True)


REFUSED_BUDGET = {"budget_s": 20, "checkpoint_s": 2, "evict_s": 10, "margin_s": 3}


def test_pods_kubectl_refuses_are_kept_and_reported_on_a_rebalance(tmp_path):
    """An emptyDir pod and a pod with no controller: kept (kubectl's default), reported, and the
    verdict names them (the node is not empty)."""
    with Stack(str(tmp_path), contract=REFUSED_BUDGET, contract_extra={"kinds": {"rebalance": "drain"}}) as s:
        _refused_pods(s)
        doc = s.publish_notice(kind="rebalance", deadline_in=15)
        held = wait_for(lambda: len(h := s.events_of("drain.pod_held", doc["id"])) == 2 and h, 20,
                        "both pods held and reported")
        assert {e["data"]["pod"]: e["data"]["reason"] for e in held} == {
            "default/lonely": "unreplicated", "default/scratch": "local_storage"}
        verdict = s.wait_event("drain.overrun", doc["id"], timeout=30)
        assert sorted(verdict["data"]["left"]) == ["default/lonely", "default/scratch"]
        assert {n for _, n, _ in s.kube.evictions()} == {"web"}


def test_pods_kubectl_refuses_are_evicted_on_a_reclaim_saying_what_is_lost(tmp_path):
    with Stack(str(tmp_path), contract=REFUSED_BUDGET) as s:
        _refused_pods(s)
        doc = s.publish_notice(kind="reclaim", deadline_in=20)
        lost = wait_for(lambda: len(x := s.events_of("drain.pod_data_lost", doc["id"])) == 2 and x, 20,
                        "what each evicted pod loses")
        assert {e["data"]["pod"]: e["data"]["lost"] for e in lost} == {
            "default/lonely": ["unreplicated: no controller recreates it"],
            "default/scratch": ["emptyDir:scratch"]}
        s.wait_event("drain.done", doc["id"], timeout=30)
        assert {n for _, n, _ in s.kube.evictions()} == {"web", "lonely", "scratch"}


def test_a_reclaim_is_not_kept_waiting_by_a_maintenance_drain_its_pods_policy_holds(tmp_path):
    """A maintenance days away keeps an unreplicated pod (kubectl's default) and a wait-completed
    one, so its drain runs on; a reclaim arriving meanwhile takes over at once and evicts both.
    (Its drain starts at once by this contract: the built-in one defers a maintenance's.)"""
    with Stack(str(tmp_path), contract=REFUSED_BUDGET, contract_extra={"start": {"maintenance": "at_once"}}) as s:
        s.kube.add_pod("lonely", NODE)
        s.kube.add_pod("batch", NODE, owner=("Job", "batch"), annotations={"sco.io/drain": "wait-completed"})
        maintenance = s.publish_notice(kind="maintenance", deadline_in=3 * 86400)
        wait_for(lambda: len(s.events_of("drain.pod_held", maintenance["id"])) == 2, 20, "both pods held")
        reclaim = s.publish_notice(kind="reclaim", deadline_in=20)
        s.wait_event("drain.done", reclaim["id"], timeout=30)
        assert {n for _, n, _ in s.kube.evictions()} == {"lonely", "batch"}
