"""Never a plain DELETE in place of an eviction by accident (issue 26, point 5), on the emulator.

The answers are the real server's: a webhook's denial is the Status ``ToStatusErr`` builds
(k8s.io/apiserver .../admission/plugin/webhook/errors: "admission webhook %q denied the request:
..." with the webhook's code, 403 here); a 500 is ``errors.NewInternalError`` ("Internal error
occurred: ...", reason InternalError); a pod under two PodDisruptionBudgets gets the eviction
handler's own 500 (pkg/registry/core/pod/storage/eviction.go, which the emulator copies). Only the
handler's 429 with the DisruptionBudget cause may lead to a delete under ``pdb_blocked=delete``.
"""
from __future__ import annotations

import time

import pytest

from executor.kube.api import KubeApi
from tests.emulators.kube_fixture import kube_emulator
from tests.executor.kube.harness import NODE, Drain, make_spec
from tests.support.wait import wait_for

WEBHOOK_DENIAL = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 403,
                  "message": 'admission webhook "evictions.guard.example.com" denied the request: '
                             "pods of team payments are evicted only by their operator"}
INTERNAL_ERROR = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 500,
                  "reason": "InternalError", "message": "Internal error occurred: etcdserver: request timed out",
                  "details": {"causes": [{"message": "etcdserver: request timed out"}]}}


@pytest.fixture
def kube(emulator):
    emulator.reset()
    emulator.add_node(NODE)
    return emulator


def start(kube, drains, **kw) -> Drain:
    d = Drain(lambda: KubeApi(kube.url, NODE, timeout_s=1.0), make_spec(**kw))
    drains.append(d)
    return d


def deletes(kube) -> list[str]:
    return [e["path"] for e in kube.requests() if e["method"] == "DELETE" and "/pods/" in e["path"]]


def evictions_after(kube, name: str, t: float) -> int:
    return len([e for e in kube.requests() if e["method"] == "POST" and e["path"].endswith(f"/pods/{name}/eviction")
                and e["time"] >= t])


@pytest.mark.parametrize("answer", ["webhook", "internal_error"])
def test_pdb_blocked_delete_sends_no_delete_after_a_webhook_denial_or_a_server_error(kube, drains, answer):
    """Past the cutoff the pod's evictions go on being denied; it is reported and evicted again,
    never DELETEd. (Fails on the main of 0bc60c5: a DELETE follows the first denial past the cutoff.)"""
    kube.add_pod("pay-0", NODE, labels={"app": "pay"})
    body = WEBHOOK_DENIAL if answer == "webhook" else INTERNAL_ERROR
    kube.fault("status", pattern="/pods/pay-0/eviction", method="POST", status=body["code"], body=body)
    d = start(kube, drains, evict_s=1.0, deadline_in=30.0, margin_s=5.0, pdb_blocked="delete")
    ev = d.wait_event("drain.eviction_blocked")
    assert ev["pod"] == "default/pay-0" and str(body["message"])[:40] in ev["error"]
    wait_for(lambda: evictions_after(kube, "pay-0", d.spec.ends.evict_at + 1.0) >= 2, 15,
             "evictions retried well past the cutoff")
    assert deletes(kube) == [] and d.events("drain.deleted") == []
    assert "pay-0" in kube.pod_names(NODE)


def test_pdb_blocked_delete_sends_no_delete_for_the_servers_two_budget_500(kube, drains):
    """The eviction handler's 500 for a pod under two PDBs is a server answer, not a PDB refusal."""
    kube.add_pdb("a", {"app": "pay"}, max_unavailable=1)
    kube.add_pdb("b", {"tier": "gold"}, max_unavailable=1)
    kube.add_pod("pay-0", NODE, labels={"app": "pay", "tier": "gold"})
    d = start(kube, drains, evict_s=1.0, deadline_in=30.0, margin_s=5.0, pdb_blocked="delete")
    ev = d.wait_event("drain.eviction_blocked")
    assert "more than one PodDisruptionBudget" in ev["error"]
    wait_for(lambda: evictions_after(kube, "pay-0", d.spec.ends.evict_at + 1.0) >= 2, 15, "retried")
    assert {s for _, n, s in kube.evictions() if n == "pay-0"} == {500}
    assert deletes(kube) == [] and "pay-0" in kube.pod_names(NODE)


def test_a_pdb_refusal_is_still_what_pdb_blocked_delete_deletes_after(kube, drains):
    """The control: the same drain, refused by the budget (429 DisruptionBudget), deletes."""
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    d = start(kube, drains, evict_s=1.0, deadline_in=30.0, margin_s=5.0, pdb_blocked="delete")
    d.wait_state("done")
    assert deletes(kube) == ["/api/v1/namespaces/default/pods/db-0"]


def test_an_unknown_eviction_version_with_nothing_known_served_is_refused_never_deleted(tmp_path, drains):
    """Discovery lists Eviction as policy/v2 only: every eviction is refused with an event naming
    it; no eviction is POSTed and nothing is DELETEd, even with pdb_blocked=delete past the cutoff.
    (Fails on main: evict_pod DELETEd the pod and called it drain.evicted.)"""
    with kube_emulator(tmp_path, policy_versions=("v2",), grace_cap=0.1) as kube:
        kube.add_node(NODE)
        kube.add_pod("web-0", NODE)
        kube.add_pod("web-1", NODE)
        d = start(kube, drains, evict_s=1.0, deadline_in=30.0, margin_s=5.0, pdb_blocked="delete")
        wait_for(lambda: len(d.events("drain.eviction_unsupported")) == 2, 15, "both refused")
        ev = d.events("drain.eviction_unsupported")[0]
        assert "policy/v2" in ev["error"] and "DELETE" in ev["error"]
        time.sleep(max(0.0, d.spec.ends.evict_at + 1.5 - time.time()))   # past the cutoff
        assert deletes(kube) == [] and kube.evictions() == []
        assert d.events("drain.evicted") == [] and d.events("drain.deleted") == []
        assert kube.pod_names(NODE) == {"web-0", "web-1"}
        assert [r for r in kube.requests() if r["path"] == "/apis/policy"]   # it looked for a known one
        d.stop()


def test_an_unknown_eviction_version_falls_back_to_the_newest_known_one_the_server_serves(tmp_path, drains):
    """Discovery lists policy/v2; the policy group still serves v1: the eviction goes as policy/v1
    (the handler takes it, as eviction.go's AcceptsGroupVersion takes v1beta1 beside v1)."""
    with kube_emulator(tmp_path, policy_versions=("v2", "v1"), grace_cap=0.1) as kube:
        kube.add_node(NODE)
        kube.add_pod("web-0", NODE)
        d = start(kube, drains)
        d.wait_state("done")
        (body,) = [e["body"] for e in kube.requests() if e["path"].endswith("/eviction")]
        assert body["apiVersion"] == "policy/v1" and kube.evictions() == [("default", "web-0", 201)]
        assert deletes(kube) == []
        d.stop()
