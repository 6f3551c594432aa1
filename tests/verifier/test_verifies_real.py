"""The verifier reads the node itself (issue 16): a real verifier process, a real kube-apiserver
v1.20.2, and an executor (faked on the wire) whose report is deliberately wrong."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from tests.rigs.kube_real_fixture import real_apiserver
from tests.rigs.kube_real_objects import create_node, create_running_pod, ensure_namespace
from tests.rigs.kube_real_rig import RealApiServer
from tests.support.drain_records import budget, record_dict
from tests.support.notices import notice_dict
from tests.support.wait import wait_for
from tests.verifier.rig import Peers, VerifierProcess

NODE = "node-a"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApiServer]:
    with real_apiserver(tmp_path_factory.mktemp("kube"), node_names=(NODE,)) as server:
        admin = server.client()
        create_node(admin, NODE)
        admin.close()
        yield server


def verifier(kube: RealApiServer, tmp_path, token: str) -> tuple[Peers, VerifierProcess]:
    token_file = tmp_path / "token"
    token_file.write_text(token)
    run_dir = str(tmp_path / "run")
    kubernetes = {"api_url": kube.url, "token_file": str(token_file), "ca_file": str(kube.ca_file), "timeout_s": 2.0}
    return Peers(run_dir), VerifierProcess(str(tmp_path), run_dir, node={"scheduler": "kubernetes", "name": NODE},
                                           kubernetes=kubernetes)


def report_empty(peers: Peers, nid: str) -> None:
    """The executor says: cordoned, node empty, done."""
    notice = next(n for n in peers.active if n["id"] == nid)
    d = peers.contract["drain"]
    now = time.time()
    with peers.lock:
        peers.progress[nid] = record_dict(budget=budget(d["checkpoint_s"], d["evict_s"], d["margin_s"], d["budget_s"]),
                                          received_at=notice["received_at"], state="done", remaining=[],
                                          steps={"cordoned": now - 0.2, "node_empty": now})


def unverified_or_done(peers: Peers, nid: str) -> list[dict]:
    return peers.of_type("drain.unverified", nid) + peers.of_type("drain.done", nid)


@pytest.mark.parametrize("identity", ["node", "wrong-token"])
def test_an_executor_that_says_empty_while_pods_remain_is_never_done(kube, tmp_path, identity):
    admin = kube.client()
    ns = f"t-{uuid.uuid4().hex[:8]}"
    ensure_namespace(admin, ns)
    create_running_pod(admin, ns, "still-here", NODE)
    admin.close()
    token = kube.nodes[NODE].token if identity == "node" else "not-a-token"
    peers, v = verifier(kube, tmp_path, token)
    try:
        v.start()
        nid = f"n-{identity}"
        # A short window: "unverified" is said at the cutoff (deadline - the rig's 2 s margin).
        peers.active = [notice_dict(nid, node=NODE, deadline=time.time() + 12, now=time.time() - 1)]
        report_empty(peers, nid)
        (ev,) = wait_for(lambda: unverified_or_done(peers, nid), 20, "a verdict")
        assert ev["type"] == "drain.unverified" and ev["data"]["outcome"] == "unverified"
        if identity == "node":   # it read the node and saw the pod the executor did not report
            assert ev["data"]["left"] == [f"{ns}/still-here"] and f"{ns}/still-here" in ev["data"]["reason"]
        else:                    # it could not read (401): it says so, and never calls it done
            assert "cannot read" in ev["data"]["reason"] and "401" in ev["data"]["reason"]
    finally:
        v.stop()
        peers.close()


def test_an_executor_that_says_empty_when_it_is_is_done(kube, tmp_path):
    """The control: the same report on an empty node, read by the verifier itself, is done."""
    peers, v = verifier(kube, tmp_path, kube.nodes[NODE].token)
    admin = kube.client()
    for p in admin.must("GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={NODE}"})["items"]:
        md = p["metadata"]
        admin.must("DELETE", f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}", {"gracePeriodSeconds": 0})
    wait_for(lambda: admin.must("GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={NODE}"})["items"]
             == [], 30, "node-a empty")
    admin.close()
    try:
        v.start()
        peers.active = [notice_dict("n-ok", node=NODE, deadline=time.time() + 60, now=time.time() - 1)]
        report_empty(peers, "n-ok")
        (ev,) = wait_for(lambda: unverified_or_done(peers, "n-ok"), 20, "a verdict")
        assert ev["type"] == "drain.done"
    finally:
        v.stop()
        peers.close()
