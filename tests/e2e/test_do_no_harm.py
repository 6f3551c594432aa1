"""Issue 16, with the real parts: the whole agent under supervisord against a real kube-apiserver
v1.20.2 (Node,RBAC + NodeRestriction), the agent as the node identity ``system:node:node-a``.

"The API server is down" is the real server's process stopped (SIGSTOP): connections are accepted
by the kernel and never answered, so every call times out -- an outage as a client sees one --
and SIGCONT brings the very same server back. The fallback command is a script that appends a
line to a file (never a real poweroff). A fake kubelet (FakeControlPlane) finishes the graceful
deletions a controller-less 1.20 server would leave pending.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from common.contract import BUILTIN, FALLBACK_MARGIN_S
from common.timefmt import parse_rfc3339
from tests.rigs.kube_real_fixture import real_apiserver
from tests.rigs.kube_real_objects import FakeControlPlane, KubeClient, create_node, create_running_pod, ensure_namespace
from tests.rigs.kube_real_rig import RealApiServer
from tests.support.stack import NODE, OTHER_NODE, Stack
from tests.support.wait import wait_for

MARK_SCRIPT = "import sys, time\nwith open(sys.argv[1], 'a') as f:\n    f.write(f'{time.time()}\\n')\n"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApiServer]:
    base = tmp_path_factory.mktemp("kube")
    with real_apiserver(base, node_names=(NODE, OTHER_NODE)) as server:
        admin = server.client()
        for node in (NODE, OTHER_NODE):
            create_node(admin, node)
        admin.close()
        yield server


@pytest.fixture
def admin(kube: RealApiServer) -> Iterator[KubeClient]:
    with closing(kube.client()) as client:
        yield client


@pytest.fixture
def plane(kube: RealApiServer) -> Iterator[FakeControlPlane]:
    with FakeControlPlane(kube.client, nodes=[NODE]) as p:
        yield p


@pytest.fixture(autouse=True)
def fresh_node(kube: RealApiServer) -> Iterator[None]:
    """Every test starts with the server answering and node-a schedulable."""
    yield
    os.kill(kube.pids["kube-apiserver"], signal.SIGCONT)
    client = kube.client()
    try:
        wait_for(lambda: client.request("GET", "/readyz").status_code == 200, 60, "the server answering again")
        client.must("PATCH", f"/api/v1/nodes/{NODE}", {"spec": {"unschedulable": None}},
                    content_type="application/strategic-merge-patch+json")
    finally:
        client.close()


class Outage:
    """The real kube-apiserver stopped and continued (its own PID only)."""

    def __init__(self, kube: RealApiServer) -> None:
        self.pid = kube.pids["kube-apiserver"]

    def begin(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def end(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


def agent_settings(kube: RealApiServer, tmp_path: Path, marker: Path, *, identity: str = NODE,
                   **executor: object) -> dict[str, dict[str, object]]:
    script = tmp_path / "leave-a-mark.py"   # the fallback: one line per run, never a poweroff
    script.write_text(MARK_SCRIPT)
    token = tmp_path / f"token-{identity}"
    token.write_text(kube.nodes[identity].token)
    token.chmod(0o600)
    return {"kubernetes": {"api_url": kube.url, "token_file": str(token), "ca_file": str(kube.ca_file),
                           "timeout_s": 1.0, "fallback_command": [sys.executable, str(script), str(marker)]},
            "executor": dict(executor)}


def marks(marker: Path) -> list[float]:
    return [float(x) for x in marker.read_text().split()] if marker.exists() else []


def namespace(admin: KubeClient) -> str:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    ensure_namespace(admin, ns)
    return ns


def unschedulable(admin: KubeClient) -> bool:
    return bool(admin.must("GET", f"/api/v1/nodes/{NODE}")["spec"].get("unschedulable"))


def record(s: Stack, nid: str) -> dict:
    with open(os.path.join(s.agent.state_dir, "executor.json"), "rb") as f:
        return json.loads(f.read())[nid]


def test_api_server_down_40s_during_a_rebalance_never_falls_back(kube, admin, tmp_path):
    """A rebalance (cordon only, not a fallback kind) while the server is down past the moment a
    reclaim would have fallen back: the drain only waits; when the server is back, it cordons."""
    marker = tmp_path / "fallback-marks"
    outage = Outage(kube)
    with Stack(str(tmp_path / "stack"), settings=agent_settings(kube, tmp_path, marker)) as s:
        outage.begin()
        down_at = time.time()
        doc = s.publish_notice(kind="rebalance", deadline_in=45)
        fallback_moment = parse_rfc3339(doc["deadline"]) - BUILTIN.fallback.lead_s - FALLBACK_MARGIN_S
        wait_for(lambda: time.time() > max(down_at + 40, fallback_moment + 2), 60, "40 s down, past the moment")
        outage.end()
        s.wait_event("drain.reconciled", doc["id"], timeout=30)
        wait_for(lambda: record(s, doc["id"])["state"] == "cordoned_only", 20, "cordoned only")
        assert unschedulable(admin)
        assert marks(marker) == []
        assert s.events_of("drain.fallback") == [] and s.events_of("drain.fallback_started") == []


def test_a_reclaim_in_dry_run_with_the_api_down_plans_once_and_ends(kube, admin, tmp_path):
    marker = tmp_path / "fallback-marks"
    outage = Outage(kube)
    with Stack(str(tmp_path / "stack"), settings=agent_settings(kube, tmp_path, marker, dry_run=True)) as s:
        outage.begin()
        doc = s.publish_notice(deadline_in=15)   # the fallback's moment is 3 s after receipt
        verdict = s.wait_event("drain.dry_run_judged", doc["id"], timeout=40)
        assert verdict["data"]["outcome"] == "dry_run"
        (would,) = [e for e in s.events_of("drain.dry_run", doc["id"]) if e["data"]["action"] == "fallback"]
        assert would["data"]["action"] == "fallback" and would["data"]["possible"] is True
        assert would["data"]["command"][-1] == str(marker) and would["data"]["if_unreachable_at"]
        # Past the fallback's moment and the deadline: still one plan, no second run, no fallback.
        wait_for(lambda: time.time() > parse_rfc3339(doc["deadline"]) + 2, 30, "past the deadline")
        (plan,) = s.events_of("drain.plan", doc["id"])
        assert plan["data"]["pods"] is None and plan["data"]["cordon"] is True
        assert record(s, doc["id"])["state"] == "dry_run"
        assert marks(marker) == [] and s.events_of("drain.fallback") == []
        outage.end()
        assert not unschedulable(admin)


def test_a_4s_blip_early_in_a_120s_window_is_waited_out_and_the_drain_is_done(kube, admin, plane, tmp_path):
    marker = tmp_path / "fallback-marks"
    ns = namespace(admin)
    create_running_pod(admin, ns, "app", NODE)
    outage = Outage(kube)
    with Stack(str(tmp_path / "stack"), settings=agent_settings(kube, tmp_path, marker)) as s:
        outage.begin()
        doc = s.publish_notice(deadline_in=120)
        s.wait_event("drain.started", doc["id"], timeout=20)
        wait_for(lambda: record(s, doc["id"])["remaining"] == ["api-server:unreachable"], 20,
                 "the drain waiting for the server")
        wait_for(lambda: time.time() - parse_rfc3339(doc["issued_at"]) >= 4, 10, "a 4 s blip")
        outage.end()
        verdict = s.wait_event("drain.done", doc["id"], timeout=40)
        assert verdict["data"]["outcome"] == "done"
        assert marks(marker) == [] and s.events_of("drain.fallback") == []
        assert s.events_of("drain.reconciled", doc["id"])
        assert unschedulable(admin)
        pods = admin.must("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        assert pods == []


def test_api_gone_for_the_whole_window_falls_back_exactly_once_in_time(kube, admin, tmp_path):
    """On the built-in contract: lead 10 s (the kubelet's shutdownGracePeriod), a reclaim."""
    marker = tmp_path / "fallback-marks"
    outage = Outage(kube)
    with Stack(str(tmp_path / "stack"), settings=agent_settings(kube, tmp_path, marker)) as s:
        outage.begin()
        doc = s.publish_notice(deadline_in=30)
        deadline = parse_rfc3339(doc["deadline"])
        moment = deadline - BUILTIN.fallback.lead_s - FALLBACK_MARGIN_S
        ran = s.wait_event("drain.fallback", doc["id"], timeout=45)
        assert ran["data"]["ran"] is True and ran["data"]["exit"] == 0
        (at,) = marks(marker)
        # Not before its moment, and still leaving the kubelet its grace period before the deadline.
        assert moment - 0.5 <= at <= deadline - BUILTIN.fallback.lead_s
        assert s.events_of("drain.fallback_started", doc["id"])
        # An executor restarted now does not run it again (the step is in its progress file).
        old = s.agent.pid("executor")
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: s.agent.status()["executor"][0] == "RUNNING" and s.agent.pid("executor") != old,
                 30, "the executor restarted")
        wait_for(lambda: "drain.crashed" not in s.agent.log("executor") and time.time() > deadline + 3, 40,
                 "past the deadline")
        assert len(marks(marker)) == 1 and len(s.events_of("drain.fallback", doc["id"])) == 1


def test_a_403_on_the_node_patch_is_a_config_error_not_an_outage(kube, admin, tmp_path):
    """The agent says it is node-a but holds node-b's identity: NodeRestriction refuses the PATCH."""
    marker = tmp_path / "fallback-marks"
    with Stack(str(tmp_path / "stack"), settings=agent_settings(kube, tmp_path, marker, identity=OTHER_NODE)) as s:
        doc = s.publish_notice(deadline_in=20)
        err = s.wait_event("drain.config_error", doc["id"], timeout=20)
        assert err["data"]["reason"].startswith("403") and "not allowed to modify node" in err["data"]["reason"]
        verdict = wait_for(lambda: (s.events_of("drain.overrun", doc["id"]) + s.events_of("drain.unverified",
                                                                                         doc["id"]) or [None])[0],
                           40, "the verdict")
        assert verdict["data"]["reason"].startswith("configuration error: 403")
        assert marks(marker) == [] and s.events_of("drain.fallback") == []
        assert not unschedulable(admin)


def test_gcp_migrate_on_host_maintenance_does_not_drain_the_node(kube, admin, plane, tmp_path):
    marker = tmp_path / "fallback-marks"
    ns = namespace(admin)
    create_running_pod(admin, ns, "app", NODE)
    with Stack(str(tmp_path / "stack"), provider="gcp", settings=agent_settings(kube, tmp_path, marker)) as s:
        s.meta.gcp_set(maintenance_event="MIGRATE_ON_HOST_MAINTENANCE")
        ignored = s.wait_event("drain.ignored", timeout=30)
        assert ignored["data"] == {"kind": "live_migration", "detail": "MIGRATE_ON_HOST_MAINTENANCE",
                                   "contract_serial": 0}
        verdict = s.wait_event("drain.ignored_judged", ignored["notice_id"], timeout=20)
        assert verdict["data"]["outcome"] == "ignored"
        assert not unschedulable(admin)
        assert [p["metadata"]["name"] for p in admin.must("GET", f"/api/v1/namespaces/{ns}/pods")["items"]] == ["app"]
        assert s.events_of("drain.cordoned") == [] and s.events_of("drain.evicted") == []
