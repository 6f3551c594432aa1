"""The drain runner (threads, HTTP) against the API-server emulator: order, lanes, PDBs, fallback."""
from __future__ import annotations

import itertools
import time
import urllib.request

import pytest

from executor.kube.api import KubeApi, NotOwnNode
from executor.kube.book_records import Inputs
from executor.kube.memo import KubeMemo
from executor.kube.node_listing import PDB_WATCH_CUT_MAX
from executor.kube.node_patch import A_CORDONED_BY_AGENT, A_DEADLINE, A_NOTICE, EXCLUDE_LB_LABEL
from executor.kube.pdb_poll import POLL_MAX_S
from executor.kube.pdb_share import PROBE_QUIET_S
from executor.scheduler import InPhase, Log, NewState, Problem, Remaining, Remember
from tests.emulators.kube import objects
from tests.emulators.kube_fixture import kube_emulator
from tests.executor.kube.harness import NODE, OTHER, TAINT_KEY, Drain, make_spec
from tests.support.wait import wait_for

PDBS = "poddisruptionbudgets"

FOREIGN = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.fixture
def kube(emulator):
    emulator.reset()
    emulator.add_node(NODE, taints=[FOREIGN])
    emulator.add_node(OTHER)
    return emulator


def start(kube, drains, inputs=None, **kw) -> Drain:
    d = Drain(lambda: KubeApi(kube.url, NODE, timeout_s=1.0), make_spec(**kw), inputs)
    drains.append(d)
    return d


def critical(name: str) -> dict:
    p = objects.pod(name, NODE, namespace="kube-system")
    p["spec"]["priorityClassName"] = "system-node-critical"
    return p


def evicted(kube) -> list[str]:
    return [name for _, name, status in kube.evictions() if status == 201]


def test_drain_in_priority_order_leaving_daemonsets_mirrors_and_other_nodes(kube, drains):
    """Ordinary pods first, critical last; DaemonSet, mirror, finished and other-node pods untouched."""
    kube.seed(critical("dns"), critical("proxy"))
    for name in ("app-1", "app-2", "app-3"):
        kube.add_pod(name, NODE)
    kube.add_daemonset("agent")
    kube.add_pod("agent-a", NODE, namespace="kube-system", owner=("DaemonSet", "agent"))
    kube.add_pod("static-a", NODE, mirror=True)
    kube.add_pod("done", NODE, phase="Succeeded")
    kube.add_pod("elsewhere", OTHER)
    d = start(kube, drains)
    d.wait_state("done")
    order = evicted(kube)
    assert sorted(order[:3]) == ["app-1", "app-2", "app-3"] and sorted(order[3:]) == ["dns", "proxy"]
    assert {n for _, n, _ in kube.evictions()} == {"app-1", "app-2", "app-3", "dns", "proxy"}
    assert kube.pod_names(NODE) == {"agent-a", "static-a", "done"}
    assert kube.pod_names(OTHER) == {"elsewhere"}
    node = kube.node(NODE)
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [FOREIGN, {"key": TAINT_KEY, "value": "reclaim", "effect": "NoSchedule"}]
    assert d.steps() == ["cordoned", "node_empty"]
    assert [r.items for r in d.reports if isinstance(r, Remaining)][-1] == ()
    assert {e["pod"] for e in d.events("drain.evicted")} == {"default/app-1", "default/app-2", "default/app-3",
                                                             "kube-system/dns", "kube-system/proxy"}


def test_one_eviction_at_a_time_under_a_pdb_and_uncovered_pods_at_once(kube, drains):
    kube.add_pdb("web", {"app": "web"}, max_unavailable="100%")
    for i in range(4):
        kube.add_pod(f"web-{i}", NODE, labels={"app": "web"})
        kube.add_pod(f"solo-{i}", NODE)
    kube.fault("delay", pattern="/eviction", seconds=0.3)
    d = start(kube, drains)
    d.wait_state("done")
    arrivals = {e["path"].split("/")[6]: e["time"] for e in kube.requests() if e["path"].endswith("/eviction")}
    web = sorted(arrivals[f"web-{i}"] for i in range(4))
    solo = sorted(arrivals[f"solo-{i}"] for i in range(4))
    assert all(b - a >= 0.29 for a, b in itertools.pairwise(web)), web
    assert solo[-1] - solo[0] < 0.25, solo


def test_a_pdb_without_room_gets_no_eviction_before_the_cutoff_then_it_is_reported_and_asked_when_quiet(kube, drains):
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0, "currentHealthy": 1,
                                                       "desiredHealthy": 1, "expectedPods": 1})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    d = start(kube, drains, evict_s=2.0)
    ev = d.wait_event("drain.eviction_blocked")
    # The watched status says 0 allowed all along: at the cutoff the lane is stuck and its pod
    # reported without a request (past the cutoff too a PDB keeps its pace: issue 27).
    assert ev["pod"] == "default/db-0" and ev["pdb"] == "default/db" and ev["attempts"] == 0
    assert ev["since_received_ms"] >= 2000 and "no room" in ev["error"]
    # A status that stood still PROBE_QUIET_S is asked (a silent watch must not hold a pod for
    # good), and then once per that period -- not at the refusal backoff.
    wait_for(lambda: [n for _, n, _ in kube.evictions()] == ["db-0"], PROBE_QUIET_S + 5, "the server asked once")
    first = min(e["time"] for e in kube.requests() if e["path"].endswith("/pods/db-0/eviction"))
    assert first >= d.spec.ends.evict_at - 0.05
    time.sleep(3.0)
    assert [(n, s) for _, n, s in kube.evictions()] == [("db-0", 429)]
    assert kube.pod_names(NODE) == {"db-0"} and d.state() is None   # still trying, not done


def test_a_pdb_without_room_gets_no_eviction_it_is_reported_at_the_cutoff_and_read_not_asked(kube, drains):
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0, "currentHealthy": 1,
                                                       "desiredHealthy": 1, "expectedPods": 1})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    kube.set_options(watch_cut={PDBS: 0.3})   # the server cuts every PDB watch short: read by name
    d = start(kube, drains, evict_s=2.0)
    ev = d.wait_event("drain.eviction_blocked")
    # The status read says 0 allowed all along: at the cutoff the lane is stuck and its pod
    # reported without a request (past the cutoff too a PDB keeps its pace: issue 27).
    assert ev["pod"] == "default/db-0" and ev["pdb"] == "default/db" and ev["attempts"] == 0
    assert ev["since_received_ms"] >= 2000 and "no room" in ev["error"]
    assert any(r.name == "drain.pdb_watch_dropped" for r in d.reports if isinstance(r, Log))
    # The PDB is read again and again (consistent GETs, each the server's own answer, the one
    # eviction.go would read), at most POLL_MAX_S apart: the server is never asked an eviction
    # it would refuse, however long the pod waits.
    time.sleep(PROBE_QUIET_S + 3.0)
    reads = [e["time"] for e in kube.requests() if e["path"].endswith("/poddisruptionbudgets/db")]
    watches = [e["time"] for e in kube.requests() if e["path"].endswith("/poddisruptionbudgets")
               and str(e["query"].get("watch")) in ("1", "true")]
    # Cut short PDB_WATCH_CUT_MAX times (one more may open before the drain's next turn), then never
    # watched again: read by name.
    assert PDB_WATCH_CUT_MAX <= len(watches) <= PDB_WATCH_CUT_MAX + 1 and max(watches) < min(reads), (watches, reads)
    assert len(reads) >= 3 and max(b - a for a, b in itertools.pairwise(reads)) <= POLL_MAX_S * 1.5 + 0.5, reads
    assert kube.evictions() == []
    assert kube.pod_names(NODE) == {"db-0"} and d.state() is None   # still trying, not done


def test_pdb_blocked_pod_is_deleted_at_the_cutoff_when_the_contract_says_so(kube, drains):
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
    kube.add_pod("db-0", NODE, labels={"app": "db"}, grace=600)
    d = start(kube, drains, evict_s=1.0, deadline_in=30.0, margin_s=5.0, pdb_blocked="delete")
    d.wait_state("done")
    (ev,) = d.events("drain.deleted")
    assert ev["pod"] == "default/db-0" and ev["reason"] == "pdb_blocked" and 20 <= ev["grace_s"] <= 24
    delete = [e for e in kube.requests() if e["method"] == "DELETE" and "/pods/db-0" in e["path"]]
    assert delete[0]["body"]["preconditions"]["uid"] and delete[0]["body"]["gracePeriodSeconds"] == ev["grace_s"]
    assert "db-0" not in kube.pod_names(NODE)


def test_a_pod_checkpointing_waits_for_its_ack(kube, drains):
    uid = kube.add_pod("ckpt", NODE)["uid"]
    kube.add_pod("free", NODE)
    d = start(kube, drains, Inputs(held=frozenset({uid})), checkpoint_s=30.0)
    wait_for(lambda: evicted(kube) == ["free"], 10, "the free pod evicted")

    # A pod that lands later is seen (by the watch) and evicted: the drain keeps turning, and the
    # held pod must still not be touched.
    kube.add_pod("late", NODE)
    wait_for(lambda: evicted(kube) == ["free", "late"], 10, "the late pod evicted")
    assert [r.phase for r in d.reports if isinstance(r, InPhase)][-1] == "checkpoint"
    d.runner.inputs = Inputs()    # its workload acked
    d.wait_state("done")
    assert evicted(kube) == ["free", "late", "ckpt"]


def test_grace_is_capped_to_the_time_left(kube, drains):
    kube.add_pod("slow", NODE, grace=300)
    d = start(kube, drains, deadline_in=20.0, margin_s=5.0)
    d.wait_state("done")
    (body,) = [e["body"] for e in kube.requests() if e["path"].endswith("/eviction")]
    assert 13 <= body["deleteOptions"]["gracePeriodSeconds"] <= 15
    assert body["deleteOptions"]["preconditions"]["uid"]


def test_load_balancer_label_first_then_cordon(kube, drains):
    kube.add_pod("app", NODE)
    d = start(kube, drains, exclude_from_lb=True)
    d.wait_state("done")
    patches = [e["body"] for e in kube.requests() if e["method"] == "PATCH"]
    assert patches[0]["metadata"]["labels"] == {EXCLUDE_LB_LABEL: "true"}
    assert patches[1]["spec"]["unschedulable"] is True
    assert kube.node(NODE)["metadata"]["labels"][EXCLUDE_LB_LABEL] == "true"
    assert d.events("drain.cordoned")[0]["lb_excluded"] is True


def test_refused_taint_leaves_a_cordon_without_it(kube, drains):
    """A node identity may not taint its own node (NodeRestriction): cordon anyway. The cordon and
    the taint are separate requests (one identity each); the node is cordoned for this notice
    already, so the one PATCH the fault refuses is the taint's."""
    code, _ = kube.request("PATCH", f"/api/v1/nodes/{NODE}", {
        "metadata": {"annotations": {A_NOTICE: "n-test", A_DEADLINE: "2030-01-01T00:00:00Z",
                                     A_CORDONED_BY_AGENT: "true"}},
        "spec": {"unschedulable": True}}, "application/merge-patch+json")
    assert code == 200
    kube.fault("status", pattern=f"/api/v1/nodes/{NODE}$", method="PATCH", status=403, count=1,
               body={"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
                     "message": f'nodes "{NODE}" is forbidden: node "{NODE}" is not allowed to modify taints'})
    kube.add_pod("app", NODE)
    d = start(kube, drains)
    d.wait_state("done")
    ev = d.events("drain.cordoned")[0]
    assert ev["tainted"] is False and "taints" in ev["taint_refused"]
    node = kube.node(NODE)
    assert node["spec"]["unschedulable"] is True and node["spec"]["taints"] == [FOREIGN]


def test_unreadable_pdbs_still_drain(kube, drains):
    kube.fault("status", pattern="poddisruptionbudgets", status=403)
    for i in range(3):
        kube.add_pod(f"web-{i}", NODE, owner=("ReplicaSet", "web"))
    d = start(kube, drains)
    d.wait_state("done")
    assert sorted(evicted(kube)) == ["web-0", "web-1", "web-2"]
    assert any(r.name == "drain.pdbs_unreadable" for r in d.reports if isinstance(r, Log))


def test_a_pdb_whose_reads_fail_is_left_to_the_server_and_said(kube, drains):
    """(Read by name: the server cuts the PDB watches short.) The PDBs list, but every GET of the one a pod waits on answers 500: its status is not used
    (the server decides, as with no PDB read at all: here it refuses), the failure is said, and
    the drain goes on."""
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 1, "currentHealthy": 2,
                                                       "desiredHealthy": 1, "expectedPods": 2})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    kube.add_pod("db-1", NODE, labels={"app": "db"})
    kube.fault("status", pattern="/poddisruptionbudgets/db$", status=500)
    kube.set_options(watch_cut={PDBS: 0.3})
    d = start(kube, drains, evict_s=40.0)
    wait_for(lambda: any(r.name == "drain.pdb_unread" for r in d.reports if isinstance(r, Log)), 10,
             "the failed read said")
    # One accepted (the list's room), then the other asked of the server, which has no room left.
    wait_for(lambda: sorted(s for _, _, s in kube.evictions())[:2] == [201, 429], 15, "the server asked")
    assert d.state() is None and not d.events("agent.thread_restarted")


def _delete_the_pdb_and_see_its_pod_evicted(kube, d: Drain) -> None:
    """The PDB "db" holding db-0 is deleted: the drain evicts the pod, once, and is done."""
    req = urllib.request.Request(kube.url + "/apis/policy/v1/namespaces/default/poddisruptionbudgets/db",
                                 method="DELETE")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200
    d.wait_state("done", timeout=20.0)
    assert [(n, s) for _, n, s in kube.evictions()] == [("db-0", 201)]


IMPOSTOR = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "other", "namespace": "default", "resourceVersion": "99"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"disruptionsAllowed": 5, "currentHealthy": 5, "desiredHealthy": 0, "observedGeneration": 1}}


@pytest.mark.parametrize("answer", [{"mode": "garbage"}, {"mode": "status", "status": 200, "body": IMPOSTOR},
                                    {"mode": "status", "status": 200, "body": [IMPOSTOR]},
                                    {"mode": "status", "status": 200, "body": "not json"}],
                         ids=["garbage", "another-pdb", "a-list", "text"])
def test_a_pdb_read_answered_with_something_else_is_no_status_and_is_said(kube, drains, answer):
    """(Read by name.) A 200 to the GET of the PDB a pod waits on whose body is not that PDB --
    not JSON, not an object, another PDB with room -- gives no status and no PDB: the drain says
    the read failed, leaves the budget to the server (which refuses: no room), and goes on."""
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0, "currentHealthy": 1,
                                                       "desiredHealthy": 1, "expectedPods": 1})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    kube.set_options(watch_cut={PDBS: 0.3})
    kube.fault(pattern="/poddisruptionbudgets/db$", method="GET", **answer)
    d = start(kube, drains, evict_s=40.0)
    wait_for(lambda: any(r.name == "drain.pdb_unread" and "not that PDB" in r.data.get("error", "")
                         for r in d.reports if isinstance(r, Log)), 10, "the answer said not to be the PDB")
    wait_for(lambda: [(n, s) for _, n, s in kube.evictions()][:1] == [("db-0", 429)], 15, "the server asked")
    named = {e.get("pdb") for e in d.events("drain.eviction_blocked")}
    assert named <= {"default/db"}, named
    assert kube.pod_names(NODE) == {"db-0"} and d.state() is None and not d.events("agent.thread_restarted")


def test_a_pdb_deleted_while_a_pod_waits_on_it_frees_the_pod(kube, drains):
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0, "currentHealthy": 1,
                                                       "desiredHealthy": 1, "expectedPods": 1})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    kube.set_options(watch_cut={PDBS: 0.3})
    d = start(kube, drains, evict_s=40.0)
    wait_for(lambda: any(e["path"].endswith("/poddisruptionbudgets/db") for e in kube.requests()), 10, "a read")
    assert kube.evictions() == []
    _delete_the_pdb_and_see_its_pod_evicted(kube, d)


def test_two_nodes_drained_at_once_reading_their_shared_pdb_by_name_both_empty_within_its_room(kube, drains):
    """Many at once, read by name: two nodes' drains share one PDB (room 1) whose watches the server
    cuts short. Both give the watch up, read the PDB, and empty their nodes; the server refuses
    at most what two drains each seeing the same room can send (one each per room seen)."""
    kube.add_pdb("web", {"app": "web"}, max_unavailable=1)
    for node in (NODE, OTHER):
        for i in range(4):
            kube.add_pod(f"web-{node}-{i}", node, labels={"app": "web"})
    kube.set_options(watch_cut={PDBS: 0.3})
    a = start(kube, drains)
    b = Drain(lambda: KubeApi(kube.url, OTHER, timeout_s=1.0), make_spec(notice_id="n-other"))
    drains.append(b)
    a.wait_state("done", timeout=60.0)
    b.wait_state("done", timeout=60.0)
    for d in (a, b):
        assert any(r.name == "drain.pdb_watch_dropped" for r in d.reports if isinstance(r, Log))
    assert kube.pod_names(NODE) == set() and kube.pod_names(OTHER) == set()
    statuses = [s for _, _, s in kube.evictions()]
    assert statuses.count(201) == 8 and statuses.count(429) <= 8, statuses
    assert any(e["path"].endswith("/poddisruptionbudgets/web") for e in kube.requests())


def test_a_drain_stopped_while_it_reads_by_name_reads_no_more_and_its_restart_reads_again(kube, drains):
    """A cancel in the middle of reading by name ends the reads with the drain; a drain started
    again for the node (the executor restarted) lists, loses its watch, reads again, sends
    nothing into no room, and finishes once the PDB is gone."""
    kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0, "currentHealthy": 1,
                                                       "desiredHealthy": 1, "expectedPods": 1})
    kube.add_pod("db-0", NODE, labels={"app": "db"})
    kube.set_options(watch_cut={PDBS: 0.3})

    def reads() -> list[float]:
        return [e["time"] for e in kube.requests() if e["path"].endswith("/poddisruptionbudgets/db")]
    first = start(kube, drains)
    wait_for(lambda: len(reads()) >= 2, 15, "reads by name")
    first.stop()
    assert not first.runner.alive
    stopped_reads = len(reads())
    time.sleep(POLL_MAX_S + 1.0)
    assert len(reads()) == stopped_reads, "a stopped drain went on reading"
    again = start(kube, drains)
    wait_for(lambda: any(r.name == "drain.pdb_watch_dropped" for r in again.reports if isinstance(r, Log))
             and len(reads()) > stopped_reads, 15, "the restarted drain reading by name")
    assert kube.evictions() == []
    _delete_the_pdb_and_see_its_pod_evicted(kube, again)


def test_a_server_ignoring_the_field_selector_cannot_make_us_evict_elsewhere(kube, drains):
    stray = objects.pod("stray", OTHER)
    stray["metadata"]["uid"] = "stray-uid"
    kube.fault("status", pattern=r"/api/v1/pods\?", method="GET", status=200,
               body={"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [stray]})
    d = start(kube, drains)
    d.wait_state("done")
    assert kube.evictions() == []


def test_the_agent_refuses_pods_of_another_node_before_any_call(kube):
    api = KubeApi(kube.url, NODE)
    other = kube.add_pod("theirs", OTHER)
    pod = kube.get(f"/api/v1/namespaces/default/pods/{other['name']}")
    kube.clear_requests()
    with pytest.raises(NotOwnNode):
        api.evict_pod(pod)
    with pytest.raises(NotOwnNode):
        api.delete_pod(pod, 1)
    with pytest.raises(NotOwnNode):
        api.patch_node(OTHER, {"spec": {"unschedulable": True}})
    assert kube.requests() == []


def test_api_server_down_falls_back_then_reconciles(kube, drains, tmp_path):
    kube.add_pod("app", NODE)
    marker = tmp_path / "fallback-ran"
    kube.down()
    d = start(kube, drains, fallback_command=("touch", str(marker)), fallback_allowed=True, fallback_at=time.time())
    started = d.wait_event("drain.fallback_started")
    assert started["command"] == ["touch", str(marker)]
    ev = d.wait_event("drain.fallback")
    assert ev["ran"] is True and ev["exit"] == 0 and marker.exists()
    kube.up()
    rec = d.wait_event("drain.reconciled")
    assert rec["tainted"] is True and rec["remaining"] == ["default/app"]
    d.wait_state("done")
    assert kube.node(NODE)["spec"]["unschedulable"] is True
    assert d.steps()[:3] == ["fallback", "reconciled", "cordoned"]


def test_the_fallback_is_on_record_before_it_runs_and_never_runs_twice(kube, drains, tmp_path):
    """The memo saying it starts is handed over (and waited for) before the command runs; a drain
    restarted on that memo -- an executor killed while the command ran -- does not run it again."""
    marker = tmp_path / "fallback-ran"
    kube.down()
    d = start(kube, drains, fallback_command=("touch", str(marker)), fallback_allowed=True, fallback_at=time.time())
    d.wait_event("drain.fallback")
    remembered = [r for r in d.reports if isinstance(r, Remember) and "fallback_started" in r.memo]
    started = next(i for i, r in enumerate(d.reports) if getattr(r, "event", "") == "drain.fallback_started")
    assert remembered and d.reports.index(remembered[0]) < started
    d.stop()
    marker.unlink()
    again = start(kube, drains, fallback_command=("touch", str(marker)), fallback_allowed=True,
                  fallback_at=time.time(), memo=KubeMemo.from_dict(remembered[0].memo))
    wait_for(lambda: any(isinstance(r, Remaining) and r.items == ("api-server:unreachable",) for r in again.reports),
             10, "the restarted drain waiting for the server")
    kube.up()
    again.wait_event("drain.reconciled")
    assert again.events("drain.fallback_started") == [] and not marker.exists()


def test_a_server_down_early_in_the_window_is_waited_for(kube, drains, tmp_path):
    """Down, but the fallback's moment (deadline - lead) is still ahead: no fallback; back, the drain finishes."""
    kube.add_pod("app", NODE)
    marker = tmp_path / "fallback-ran"
    kube.down()
    d = start(kube, drains, fallback_command=("touch", str(marker)), fallback_allowed=True,
              fallback_at=time.time() + 3600)
    wait_for(lambda: any(isinstance(r, Remaining) and r.items == ("api-server:unreachable",) for r in d.reports),
             10, "the drain waiting for the server")
    kube.up()
    d.wait_state("done")
    assert d.events("drain.fallback") == [] and d.events("drain.fallback_started") == [] and not marker.exists()
    assert "reconciled" in d.steps()


def test_a_kind_the_contract_does_not_allow_never_falls_back(kube, drains, tmp_path):
    """A rebalance (not in the contract's fallback kinds) with the server down, past the moment: it only waits."""
    marker = tmp_path / "fallback-ran"
    kube.down()
    d = start(kube, drains, kind="rebalance", fallback_command=("touch", str(marker)), fallback_allowed=False,
              fallback_at=time.time() - 1)
    wait_for(lambda: any(isinstance(r, Remaining) and r.items == ("api-server:unreachable",) for r in d.reports),
             10, "the drain waiting for the server")
    kube.up()
    d.wait_event("drain.reconciled")   # it waited the outage out, past the moment, and never went around it
    assert d.events("drain.fallback") == [] and d.events("drain.fallback_started") == [] and not marker.exists()


def test_dry_run_with_the_server_down_spools_one_plan_and_ends(kube, drains, tmp_path):
    marker = tmp_path / "fallback-ran"
    kube.down()
    d = start(kube, drains, dry_run=True, fallback_command=("touch", str(marker)), fallback_allowed=True,
              fallback_at=time.time() - 1)
    d.wait_state("dry_run")
    (plan,) = d.events("drain.plan")
    assert plan["pods"] is None and plan["unreadable"] and plan["cordon"] is True
    (would,) = d.events("drain.dry_run")
    assert would["action"] == "fallback" and would["command"] == ["touch", str(marker)] and would["possible"]
    assert would["if_unreachable_at"]
    assert not marker.exists() and d.events("drain.fallback") == []
    kube.up()


def test_dry_run_plan_lists_each_pod_in_order_with_grace_and_phase(kube, drains):
    kube.seed(critical("dns"))
    kube.add_pod("web", NODE)
    kube.clear_requests()
    d = start(kube, drains, dry_run=True, inputs=Inputs(held=frozenset()))
    d.wait_state("dry_run")
    (plan,) = d.events("drain.plan")
    assert plan["cordon"] is True and plan["taint"] == {"key": TAINT_KEY, "value": "reclaim", "effect": "NoSchedule"}
    assert plan["condition"] == {"type": "NoticeScheduled", "status": "True", "reason": "Reclaim",
                                 "message": "notice n-test from unknown, deadline 2030-01-01T00:00:00Z"}
    assert [(p["pod"], p["phase"], p["tier"]) for p in plan["pods"]] == [
        ("default/web", "evict", 0), ("kube-system/dns", "evict", 1)]
    assert all(isinstance(p["grace_s"], int) for p in plan["pods"])
    assert [r for r in kube.requests() if r["method"] != "GET"] == []
    assert sum(isinstance(r, NewState) for r in d.reports) == 1


def test_a_refused_credential_is_a_config_error_not_an_outage(emulator, drains, tmp_path):
    """401 on every call: a Problem (the verdict's reason), never the fallback."""
    marker = tmp_path / "fallback-ran"
    with kube_emulator(tmp_path / "auth", tokens={"good": "system:node:node-a"}) as kube:
        kube.add_node(NODE)
        d = Drain(lambda: KubeApi(kube.url, NODE, "wrong-token", timeout_s=1.0),
                  make_spec(fallback_command=("touch", str(marker)), fallback_allowed=True,
                            fallback_at=time.time() - 1))
        drains.append(d)
        problem = wait_for(lambda: next((r for r in d.reports if isinstance(r, Problem)), None), 10, "a Problem")
        assert problem.reason.startswith("401")
        d.stop()
    assert d.events("drain.fallback") == [] and not marker.exists()


def test_a_restarted_drain_never_evicts_a_pod_twice(kube, drains):
    for i in range(3):
        kube.add_pod(f"slow-{i}", NODE, terminate_after=3)
    first = start(kube, drains)
    wait_for(lambda: len(first.events("drain.evicted")) == 3, 10, "three evictions")
    first.stop()
    # What the record keeps of the first run: its last memo.
    memo = [r.memo for r in first.reports if isinstance(r, Remember)][-1]
    assert set(memo["evicted"]) == {e["uid"] for e in first.events("drain.evicted")}
    second = start(kube, drains, memo=KubeMemo.from_dict(memo), steps_done=frozenset({"cordoned"}))
    second.wait_state("done")
    assert sorted(evicted(kube)) == ["slow-0", "slow-1", "slow-2"]
    assert second.events("drain.evicted") == []


def test_policy_v1beta1_server(tmp_path, drains):
    with kube_emulator(tmp_path, policy_versions=("v1beta1",), grace_cap=0.1) as kube:
        kube.add_node(NODE)
        kube.add_pdb("web", {"app": "web"}, max_unavailable=1, api_version="policy/v1beta1")
        kube.add_pod("web-0", NODE, labels={"app": "web"})
        d = start(kube, drains)
        d.wait_state("done")
        (body,) = [e["body"] for e in kube.requests() if e["path"].endswith("/eviction")]
        assert body["apiVersion"] == "policy/v1beta1"
        assert any("/apis/policy/v1beta1/namespaces/default/poddisruptionbudgets" in e["path"] for e in kube.requests())
        d.stop()


def test_cordon_only_policy(kube, drains):
    kube.add_pod("app", NODE)
    d = start(kube, drains, cordon_only=True)
    d.wait_state("cordoned_only")
    assert kube.evictions() == [] and kube.node(NODE)["spec"]["unschedulable"] is True
