"""bench.fleet's fake kubelets on a real kube-apiserver v1.20.2 (bench/fleet_cluster.py ``Kubelets``):
one per node, each deleting its own node's terminating pods as its node identity, and never waiting
for the fake disruption controller -- in a hall they are separate components on separate machines."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from bench.fleet_cluster import FleetControlPlane
from tests.rigs.kube_real_fixture import real_apiserver
from tests.rigs.kube_real_objects import KubeClient, create_node, create_pdb, create_running_pod, ensure_namespace
from tests.rigs.kube_real_rig import RealApiServer
from tests.support.wait import wait_for

NODES = ("kb-a", "kb-b")
NS = "kb-work"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApiServer]:
    with real_apiserver(tmp_path_factory.mktemp("kube-kb"), node_names=NODES) as server:
        admin = server.client()
        for node in NODES:
            create_node(admin, node)
        ensure_namespace(admin, NS)
        admin.close()
        yield server


def _terminating(admin: KubeClient, names: list[tuple[str, str]]) -> None:
    """Pods bound to their nodes, then deleted with their 30 s grace: terminating, as after an eviction."""
    for name, node in names:
        create_running_pod(admin, NS, name, node, labels={"app": "kb"})
    for name, _ in names:
        resp = admin.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}")
        assert resp.status_code == 200, resp.text


def _gone(admin: KubeClient, name: str) -> bool:
    return admin.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}").status_code == 404


def test_each_node_s_kubelet_finishes_its_pods_while_the_disruption_controller_is_stuck(
        kube: RealApiServer, admin: KubeClient) -> None:
    create_pdb(admin, NS, "kb-pdb", {"app": "kb"}, max_unavailable=1)
    plane = FleetControlPlane(kube, interval_s=0.05)
    stuck = threading.Event()
    released = threading.Event()

    def put_stuck(*_: Any) -> None:      # the controller's status write never comes back
        stuck.set()
        released.wait(60)

    plane._put_one = put_stuck  # type: ignore[method-assign]
    plane.start()
    try:
        names = [(f"p-{node}-{i}", node) for node in NODES for i in range(3)]
        _terminating(admin, names)
        wait_for(stuck.is_set, timeout=20, what="the controller's first status write")
        wait_for(lambda: all(_gone(admin, n) for n, _ in names), timeout=30,
                 what="every terminating pod deleted while the controller's write hangs")
        assert plane.errors == []
        assert plane.cache.kubelet_turns.n == len(names)
    finally:
        released.set()
        plane.stop()


def test_a_kubelet_deletes_as_its_node_and_the_server_keeps_it_to_that_node(kube: RealApiServer,
                                                                            admin: KubeClient) -> None:
    """NodeRestriction: a node may delete its own pods only; the fake kubelet is held to that too."""
    _terminating(admin, [("mine", "kb-a"), ("theirs", "kb-b")])
    node = kube.node_client("kb-a")
    try:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
        assert node.request("DELETE", f"/api/v1/namespaces/{NS}/pods/theirs", body).status_code == 403
        assert node.request("DELETE", f"/api/v1/namespaces/{NS}/pods/mine", body).status_code == 200
    finally:
        node.close()
    assert _gone(admin, "mine") and not _gone(admin, "theirs")
