"""One identity per request, on a real kube-apiserver v1.20.2 (Node,RBAC + NodeRestriction, x509
client certificates from the rig's CA, an audit log of Node patches).

The node identity is an x509 certificate CN=system:node:<name>, O=system:nodes -- what the kubelet
holds and what docs/kubernetes.md recommends -- and the taint credential a TokenRequest token of the
sco-agent service account (deploy/kubernetes/rbac.yaml). The executor's own factory builds the
clients from configuration. The audit log says who the server took each request to be.

What NodeRestriction does in 1.20 (plugin/pkg/admission/noderestriction/admission.go, admitNode,
the Update branch): a node may update its own Node, but "Don't allow a node to update its own
taints" -- any difference between the old and new spec.taints is refused with
``node %q is not allowed to modify taints``. Cordoning (spec.unschedulable), annotations and the
node.kubernetes.io/ labels are allowed. The tests below check exactly that against the server.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.config import build
from common.http import TlsFiles, tls_context
from executor.kube import node_steps
from executor.kube.api import KubeApi, KubeError
from executor.kube.scheduler import api_factory
from tests.executor.kube.harness import TAINT_KEY
from tests.rigs.kube_real_fixture import agent_cluster, sa_token
from tests.rigs.kube_real_rig import RealApiServer
from tests.support.wait import wait_for

NODES = ("node-a", "node-b", "node-c")
SA_USER = "system:serviceaccount:sco-system:sco-agent"
DEADLINE = "2030-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealApiServer]:
    with agent_cluster(tmp_path_factory.mktemp("kube-ids"), NODES) as server:
        yield server


def agent_api(kube: RealApiServer, tmp_path: Path, node: str, taint_token: str) -> KubeApi:
    """The executor's factory, configured as docs/kubernetes.md says: the kubelet-style certificate
    as the node identity, a node token file present too (it must not be sent with the certificate),
    and the taint token file."""
    cert, key = kube.node_cert(node)
    (tmp_path / "node-token").write_text(kube.nodes[node].token)
    (tmp_path / "taint-token").write_text(taint_token)
    config = build({"node": {"name": node}, "kubernetes": {
        "api_url": kube.url, "ca_file": str(kube.ca_file), "client_cert_file": str(cert),
        "client_key_file": str(key), "token_file": str(tmp_path / "node-token"),
        "taint_token_file": str(tmp_path / "taint-token") if taint_token else ""}})
    make = api_factory(config)
    assert make is not None
    return make()


def node_patches(kube: RealApiServer, node: str, at_least: int) -> list[tuple[str, dict]]:
    """(user, request body) of every completed PATCH of ``node``, oldest first."""
    def read() -> list[tuple[str, dict]]:
        return [(e["user"]["username"], e.get("requestObject") or {}) for e in kube.audit()
                if e.get("stage") == "ResponseComplete" and e["verb"] == "patch"
                and e["objectRef"].get("resource") == "nodes" and not e["objectRef"].get("subresource")
                and e["objectRef"].get("name") == node and e["responseStatus"]["code"] == 200]
    return wait_for(lambda: len(p := read()) >= at_least and p, 10, f"{at_least} audited patches of {node}")


def test_cordon_goes_as_the_node_and_the_taint_as_the_service_account(kube, tmp_path):
    api = agent_api(kube, tmp_path, "node-a", sa_token(kube))
    try:
        assert "Authorization" not in api.headers            # the certificate is the node identity
        assert api.taint_http is not api.http                # the taint token has its own connection
        done = node_steps.cordon_and_taint(api, TAINT_KEY, "reclaim", "n-1", DEADLINE)
        assert done == {"patched": True, "tainted": True, "condition": "NoticeScheduled", "condition_patched": True}
        node = api.get_node()
        assert node["spec"]["unschedulable"] is True
        assert {"key": TAINT_KEY, "value": "reclaim", "effect": "NoSchedule"} in node["spec"]["taints"]
        assert node_steps.uncordon(api, TAINT_KEY, "n-1") is True
        node = api.get_node()
        assert not node["spec"].get("unschedulable") and not any(
            t["key"] == TAINT_KEY for t in node["spec"].get("taints") or [])
    finally:
        api.close()
    patches = node_patches(kube, "node-a", at_least=4)
    for user, body in patches:
        spec = body.get("spec") or {}
        if "taints" in spec:
            assert user == SA_USER and set(spec) == {"taints"}, (user, body)
        else:
            assert user == "system:node:node-a", (user, body)
    assert [("taints" in (b.get("spec") or {})) for _, b in patches] == [False, True, True, False]


def test_the_node_identity_alone_may_not_taint_its_node(kube, tmp_path):
    api = agent_api(kube, tmp_path, "node-b", taint_token="")
    try:
        assert api.taint_http is api.http
        with pytest.raises(KubeError) as refused:
            api.patch_node_taints("node-b", {"spec": {"taints": [
                {"key": TAINT_KEY, "value": "reclaim", "effect": "NoSchedule"}]}})
        assert refused.value.status == 403
        assert 'node "node-b" is not allowed to modify taints' in refused.value.message
        done = node_steps.cordon_and_taint(api, TAINT_KEY, "reclaim", "n-2", DEADLINE)
        assert done["tainted"] is False and "not allowed to modify taints" in done["taint_refused"]
        node = api.get_node()
        assert node["spec"]["unschedulable"] is True
        assert not any(t["key"] == TAINT_KEY for t in node["spec"].get("taints") or [])
    finally:
        api.close()
    assert {user for user, _ in node_patches(kube, "node-b", at_least=1)} == {"system:node:node-b"}


def test_a_certificate_and_a_token_on_one_connection_is_taken_as_the_certificate(kube):
    """Why the two must never mix: kube-apiserver tries x509 before bearer tokens, so the service
    account's token sent over the node's certificate connection is ignored -- the request is the
    node's, and NodeRestriction refuses the taint. (What the agent did before issue 17.)"""
    cert, key = kube.node_cert("node-c")
    mixed = tls_context(TlsFiles(str(kube.ca_file), str(cert), str(key)))
    api = KubeApi(kube.url, "node-c", node_token=sa_token(kube), tls=mixed, taint_tls=mixed)
    try:
        with pytest.raises(KubeError) as refused:
            api.patch_node_taints("node-c", {"spec": {"taints": [
                {"key": TAINT_KEY, "value": "reclaim", "effect": "NoSchedule"}]}})
        assert refused.value.status == 403 and "not allowed to modify taints" in refused.value.message
    finally:
        api.close()
    with pytest.raises(ValueError, match="one identity per connection"):
        KubeApi(kube.url, "node-c", "a-token", tls=TlsFiles(str(kube.ca_file), str(cert), str(key)))
