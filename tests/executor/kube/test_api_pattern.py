"""The agent's request pattern for one drain, on the API-server emulator (issue 19 point 4).

What a hall reclaim must not do to the API server: LIST the node's pods as a consistent read in a
loop, LIST PDBs cluster-wide, retry a 429 at once, or treat API Priority and Fairness throttling as
a PodDisruptionBudget refusal. The emulator's request log says what the drain really sent.
"""
from __future__ import annotations

import itertools
import json
import time
import urllib.request
from typing import Any

from executor.kube.api import KubeApi, KubeError, Unreachable
from tests.executor.kube.harness import NODE, Drain, make_spec
from tests.support.wait import wait_for

PODS, NAMESPACES = 30, ("team-a", "team-b", "team-c")
# The figure docs/kubernetes.md reports: every request of a 30-pod drain but the evictions (with
# one PDB watch per namespace: 3 more than without, and no refused eviction instead of 10; and
# the Node's NoticeScheduled condition, one PATCH of nodes/status computed from the cordon's answer).
NON_EVICTION_BOUND = 15


def start(kube, drains, **kw: Any) -> Drain:
    d = Drain(lambda: KubeApi(kube.url, NODE, timeout_s=2.0), make_spec(**kw))
    drains.append(d)
    return d


def kind_of(e: dict[str, Any]) -> str:
    path, query, method = e["path"], e["query"], e["method"]
    if path == "/api/v1/pods":
        if str(query.get("watch")) in ("1", "true"):
            return "pods.watch"
        if query.get("resourceVersionMatch") == "NotOlderThan" and query.get("resourceVersion"):
            return "pods.list.not_older_than"
        return "pods.list.cache" if str(query.get("resourceVersion")) == "0" else "pods.list.consistent"
    if "poddisruptionbudgets" in path:
        if str(query.get("watch")) in ("1", "true"):
            return "pdbs.watch"
        return "pdbs" if path.endswith("/poddisruptionbudgets") else "pdbs.get"
    if path.endswith("/eviction"):
        return "eviction"
    if path.startswith("/api/v1/nodes/"):
        return f"node.{method.lower()}"
    return f"other {method} {path}"


def eviction_times(kube, pod: str) -> list[tuple[float, int]]:
    return [(e["time"], e["status"]) for e in kube.requests()
            if e["path"].endswith(f"/pods/{pod}/eviction")]


def test_one_drain_of_30_pods_watches_reads_pdbs_per_namespace_and_stays_within_its_bound(kube, drains):
    for ns in NAMESPACES:
        kube.add_pdb("web", {"app": "web"}, namespace=ns, max_unavailable="50%")
    kube.add_pdb("unrelated", {"app": "web"}, namespace="elsewhere", max_unavailable=1)
    for i in range(PODS):
        kube.add_pod(f"web-{i:02d}", NODE, namespace=NAMESPACES[i % 3], labels={"app": "web"})
    d = start(kube, drains)
    d.wait_state("done", 60)
    log = kube.requests()
    kinds = [kind_of(e) for e in log]
    counts = {k: kinds.count(k) for k in sorted(set(kinds))}
    print(f"requests of one {PODS}-pod drain: {len(log)} {counts}")
    assert sum(1 for e in log if kind_of(e) == "eviction" and e["status"] == 201) == PODS
    # The PDBs' status is watched, so no eviction is sent that the budget would refuse.
    assert [e["status"] for e in log if kind_of(e) == "eviction" and e["status"] != 201] == []
    assert counts.get("pdbs.watch", 0) == len(NAMESPACES)
    assert counts.get("pdbs.get", 0) == 0   # watched, never read by name (the server never cut a watch short)
    # The pods are watched: one list from the watch cache, a watch, and one list that confirms
    # "empty" (at most once a second) from the watch cache as of the version the watch has reached
    # -- never a consistent LIST, which on 1.20 reads every pod of the cluster from etcd.
    assert counts.get("pods.watch", 0) >= 1
    assert counts.get("pods.list.cache", 0) <= 2
    assert 1 <= counts.get("pods.list.not_older_than", 0) <= 2
    assert counts.get("pods.list.consistent", 0) == 0
    confirm = next(e for e in log if kind_of(e) == "pods.list.not_older_than")
    assert "limit" not in confirm["query"]   # with a limit the cacher sends it to etcd
    # PDBs: only in the namespaces of the node's pods, paginated, never cluster-wide.
    pdb_paths = {e["path"] for e in log if kind_of(e) == "pdbs"}
    assert pdb_paths == {f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets" for ns in NAMESPACES}
    assert all(str(e["query"].get("limit")) == "100" for e in log if kind_of(e) == "pdbs")
    others = [k for k in kinds if k != "eviction"]
    assert len(others) <= NON_EVICTION_BOUND, counts
    assert counts.get("other GET /api/v1", 0) == 1, counts   # discovery once per drain, not per thread
    # One GET of the Node: the condition's and the taint's patches start from the last write's answer.
    assert counts.get("node.get", 0) == 1 and counts.get("node.patch", 0) == 3, counts


def test_an_apf_429_waits_its_retry_after_with_backoff_and_is_not_a_pdb_refusal(kube, drains):
    kube.add_pod("app", NODE)
    kube.throttle(pattern="/pods/app/eviction", method="POST", count=2, retry_after=1)
    d = start(kube, drains)
    d.wait_state("done")
    times = eviction_times(kube, "app")
    assert [status for _, status in times] == [429, 429, 201]
    # Never before the server's Retry-After (1 s), and the second throttle backs off further (2 s).
    assert times[1][0] - times[0][0] >= 1.0
    assert times[2][0] - times[1][0] >= 2.0
    assert d.events("drain.eviction_blocked") == []
    assert d.events("drain.evicted")[0]["attempts"] == 1   # throttling is not an attempt on the pod


def test_a_throttled_cordon_waits_its_retry_after(kube, drains):
    kube.throttle(pattern=f"/api/v1/nodes/{NODE}$", method="PATCH", count=1, retry_after=1)
    d = start(kube, drains)
    d.wait_state("done")
    patches = [(e["time"], e["status"]) for e in kube.requests() if kind_of(e) == "node.patch"]
    assert [s for _, s in patches][:2] == [429, 200] and patches[1][0] - patches[0][0] >= 1.0


def test_at_the_cutoff_a_pdb_refusal_escalates_and_apf_throttling_does_not(kube, drains):
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    kube.add_pod("web-0", NODE)
    kube.throttle(pattern="/pods/web-0/eviction", method="POST", count=3, retry_after=1)
    d = start(kube, drains, evict_s=1.0, deadline_in=30.0, margin_s=5.0, pdb_blocked="delete")
    d.wait_state("done", 30)
    assert [e["pod"] for e in d.events("drain.deleted")] == ["default/db-0"]
    deletes = [e["path"] for e in kube.requests() if e["method"] == "DELETE" and "/pods/" in e["path"]]
    assert not [p for p in deletes if p.endswith("/web-0")]
    web = eviction_times(kube, "web-0")
    assert [s for _, s in web] == [429, 429, 429, 201]
    assert all(b[0] - a[0] >= 1.0 for a, b in itertools.pairwise(web))
    # db-0 was deleted because its budget refused it, which the event names.
    assert d.events("drain.deleted")[0]["pdb"] == "default/db"
    assert {s for _, s in eviction_times(kube, "db-0")} == {429}


def _put_pdb_status(kube, name: str, status: dict[str, Any]) -> None:
    """As the disruption controller does: PUT the PDB's status subresource."""
    path = f"/apis/policy/v1/namespaces/default/poddisruptionbudgets/{name}"
    with urllib.request.urlopen(kube.url + path, timeout=5) as resp:
        doc = json.load(resp)
    doc["status"] = {**doc.get("status", {}), **status}
    req = urllib.request.Request(kube.url + path + "/status", data=json.dumps(doc).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def test_no_eviction_while_the_budget_is_0_and_one_soon_after_its_status_allows_it(kube, drains):
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0, "currentHealthy": 2,
                                                       "desiredHealthy": 2, "expectedPods": 2})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    kube.add_pod("db-1", NODE, labels={"app": "db"})
    kube.add_pod("free", NODE)
    d = start(kube, drains, evict_s=40.0)
    wait_for(lambda: [n for _, n, s in kube.evictions() if s == 201] == ["free"], 10, "the free pod evicted")
    watches = lambda: [e for e in kube.requests() if kind_of(e) == "pdbs.watch"]
    wait_for(watches, 10, "the PDB watched")
    # A second of the drain watching (it replans at least every 0.25 s): still nothing for db.
    wait_for(lambda: time.time() - watches()[0]["time"] > 1.0, 10, "a second of watching")
    assert [n for _, n, _ in kube.evictions()] == ["free"], kube.evictions()
    assert d.state() is None
    # Watched all along: never read by name (a read due but never made spun the drain's loop once).
    assert [e for e in kube.requests() if kind_of(e) == "pdbs.get"] == []
    _put_pdb_status(kube, "db", {"disruptionsAllowed": 1})
    wait_for(lambda: [n for _, n, _ in kube.evictions()][1:] == ["db-0"], 10, "one eviction after the status change")
    # It took the one disruption allowed: no second eviction (and so no refusal) follows.
    assert all(s == 201 for _, _, s in kube.evictions())


def test_a_confirming_list_ahead_of_the_cache_is_the_servers_answer_not_an_outage(kube):
    """A list "not older than" a version the server's watch cache has not reached is answered after
    3 s with the server's own 504 Timeout "Too large resource version" (modelled by the emulator):
    a failed list, retried next turn, never an API server counted down (which could lead the drain
    to go around it)."""
    kube.add_pod("app", NODE)
    api = KubeApi(kube.url, NODE, timeout_s=10.0)
    pods, rv = api.list_pods_at("0")
    assert [p["metadata"]["name"] for p in pods] == ["app"]
    assert [p["metadata"]["name"] for p in api.list_pods_at(rv, not_older_than=True)[0]] == ["app"]
    try:
        api.list_pods_at(str(int(rv) + 1000), not_older_than=True)
    except Unreachable as e:
        raise AssertionError(f"counted as an outage: {e}") from e
    except KubeError as e:
        assert e.status == 504 and "Too large resource version" in e.message
    else:
        raise AssertionError("a version the store has not reached was served")
    finally:
        api.close()
