"""Issue 28, points 3 and 4, with the whole agent under supervisord (the API-server emulator, a real
nats-server), the agent holding only the node identity ``system:node:node-a`` (the emulator judges
its writes as the Node authorizer and NodeRestriction do: tests/emulators/kube/node_identity.py):

3. the Node's ``NoticeScheduled`` appears with the cordon, names the notice that governs (a reclaim
   taking over a maintenance drain; then, either cancelled first, the one left), is
   never False while a notice remains (sampled every 100 ms), and turns False, ``Withdrawn``, at
   the last cancel;
4. a pod the agent deletes (contract ``pdb_blocked: delete``) gets ``DisruptionTarget`` /
   ``TerminationByNodeAgent`` through ``pods/status`` before the DELETE.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from executor.kube import conditions
from tests.support.sampler import Sampler
from tests.support.stack import NODE, Stack
from tests.support.wait import wait_for

NODE_TOKEN = "node-a-token"
# The test's own requests keep the kubeconfig's token (tests.emulators.kube_fixture), as an admin.
TOKENS = {NODE_TOKEN: f"system:node:{NODE}", "emulator-token": "admin"}


def node_identity_stack(tmp_path: Any, **kw: Any) -> Stack:
    token_file = tmp_path / "node-token"
    token_file.write_text(NODE_TOKEN)
    return Stack(str(tmp_path / "stack"), settings={"kubernetes": {"token_file": str(token_file)}}, **kw)


def scheduled(s: Stack) -> dict[str, Any]:
    return conditions.condition_of(s.node(), conditions.NOTICE_SCHEDULED) or {}


def names(s: Stack, notice: dict[str, Any]) -> bool:
    c = scheduled(s)
    return c.get("status") == "True" and c.get("reason") == conditions.camel_case(notice["kind"]) \
        and c.get("message", "").startswith(f"notice {notice['id']} from ")


@pytest.mark.parametrize("cancel_first", ["reclaim", "maintenance"])
def test_the_condition_comes_with_the_cordon_follows_the_governing_notice_and_is_withdrawn_at_the_last(
        tmp_path, cancel_first):
    with node_identity_stack(tmp_path) as s:
        s.kube.set_options(tokens=TOKENS)
        s.kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
        s.kube.add_pod("db-0", NODE, labels={"app": "db"}, owner=("StatefulSet", "db"))
        maintenance = s.publish_notice(kind="maintenance", deadline_in=600)
        cordoned = s.wait_event("drain.cordoned", maintenance["id"], timeout=30)
        assert cordoned["data"]["condition"] == "NoticeScheduled"
        # The node identity alone may not taint (NodeRestriction): cordoned and said why, untainted.
        assert cordoned["data"]["tainted"] is False and s.cordoned()
        wait_for(lambda: names(s, maintenance), 10, "the condition naming the maintenance")
        since = scheduled(s)["lastTransitionTime"]
        assert f"from sco, deadline {maintenance['deadline'][:19]}" in scheduled(s)["message"]
        ready = conditions.condition_of(s.node(), "Ready")
        assert ready is not None and ready["status"] == "True"   # the kubelet's own, kept
        sampler = Sampler(lambda: scheduled(s).get("status"), 0.1)
        try:
            reclaim = s.publish_notice(kind="reclaim", deadline_in=300)
            wait_for(lambda: names(s, reclaim), 20, "the condition naming the reclaim (it took over)")
            first, last = (reclaim, maintenance) if cancel_first == "reclaim" else (maintenance, reclaim)
            s.publish_notice(kind="cancel", notice_id=first["id"])
            kept = s.wait_event("drain.uncordoned", first["id"], timeout=20)
            assert kept["data"]["action"] == "kept_for_other_notice"
            wait_for(lambda: names(s, last), 20, "the condition naming the notice left")
            time.sleep(1)
        finally:
            samples = sampler.stop()
        assert samples and all(status == "True" for status in samples), samples
        assert scheduled(s)["lastTransitionTime"] == since
        s.publish_notice(kind="cancel", notice_id=last["id"])
        done = s.wait_event("drain.uncordoned", last["id"], timeout=20)
        assert done["data"]["condition_withdrawn"] is True
        c = scheduled(s)
        assert (c["status"], c["reason"]) == ("False", "Withdrawn") and last["id"] in c["message"]
        assert not s.cordoned() and conditions.condition_of(s.node(), "Ready") == ready
        # Every write the agent made went as the node, and none was refused but the taint (a 409 is
        # a resourceVersion race with the agent's own other thread, read again and retried).
        writes = [e for e in s.kube.requests() if e["method"] == "PATCH" and e["user"] == f"system:node:{NODE}"]
        assert any(e["path"] == f"/api/v1/nodes/{NODE}/status" for e in writes)
        assert {e["status"] for e in writes if "taints" not in str(e.get("body"))} <= {200, 409}
        assert {e["status"] for e in writes if e["path"].endswith("/status")} == {200}


def test_a_pod_the_agent_deletes_is_marked_disruption_target_first(tmp_path):
    contract = {"budget_s": 20, "checkpoint_s": 0, "evict_s": 5, "margin_s": 5}
    with node_identity_stack(tmp_path, contract=contract, contract_extra={"pdb_blocked": "delete"}) as s:
        s.kube.set_options(tokens=TOKENS)
        s.kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
        s.kube.add_pod("db-0", NODE, labels={"app": "db"}, owner=("StatefulSet", "db"))
        doc = s.publish_notice(kind="reclaim", deadline_in=30)
        deleted = s.wait_event("drain.deleted", doc["id"], timeout=40)
        assert deleted["data"]["pod"] == "default/db-0"
        calls = [(e["method"], e["path"], e["status"], e["user"]) for e in s.kube.requests()
                 if "/pods/db-0" in e["path"] and e["method"] in ("PATCH", "DELETE")]
        assert calls[:2] == [
            ("PATCH", "/api/v1/namespaces/default/pods/db-0/status", 200, f"system:node:{NODE}"),
            ("DELETE", "/api/v1/namespaces/default/pods/db-0", 200, f"system:node:{NODE}")], calls
        (mark,) = [e for e in s.kube.requests() if e["path"].endswith("/pods/db-0/status")]
        (cond,) = mark["body"]["status"]["conditions"]
        assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionTarget", "True", "TerminationByNodeAgent")
        assert doc["id"] in cond["message"]
        assert s.events_of("drain.disruption_target_failed", doc["id"]) == []


def test_an_executor_killed_mid_withdrawal_turns_the_condition_when_it_is_back(tmp_path):
    """The cancel's condition write hangs (the server does not answer it) and the executor is
    SIGKILLed meanwhile: the executor supervisord starts again finishes the withdrawal from the
    node's real state -- the annotation still names the notice, so the condition turns False,
    Withdrawn, and the node opens."""
    with node_identity_stack(tmp_path) as s:
        s.kube.set_options(tokens=TOKENS)
        s.kube.add_pdb("db", {"app": "db"}, frozen_status={"disruptionsAllowed": 0})
        s.kube.add_pod("db-0", NODE, labels={"app": "db"}, owner=("StatefulSet", "db"))
        doc = s.publish_notice(kind="reclaim", deadline_in=300)
        wait_for(lambda: names(s, doc), 30, "the condition naming the reclaim")
        s.kube.fault("hang", pattern=f"/nodes/{NODE}/status$")
        s.publish_notice(kind="cancel", notice_id=doc["id"])
        wait_for(lambda: any(e["path"].endswith("/status") and e.get("fault") == "hang"
                             for e in s.kube.requests()), 20, "the withdrawal's condition write hanging")
        old = s.agent.pid("executor")
        os.kill(old, signal.SIGKILL)
        s.kube.clear_faults()
        wait_for(lambda: s.agent.status()["executor"] == ("RUNNING", s.agent.pid("executor"))
                 and s.agent.pid("executor") != old, 30, "the executor restarted")
        s.wait_event("drain.uncordoned", doc["id"], timeout=30)
        c = scheduled(s)
        assert (c["status"], c["reason"]) == ("False", "Withdrawn")
        assert not s.cordoned()
