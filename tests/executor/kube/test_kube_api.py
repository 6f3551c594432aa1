"""KubeApi's client plumbing: threads share one TLS context; the executor's factory reads tokens."""
from __future__ import annotations

from common.config import build
from executor.kube.api import KubeApi
from executor.kube.scheduler import api_factory


def test_a_client_given_a_tls_context_uses_it_over_its_own_connection():
    api = KubeApi("https://127.0.0.1:1", "node-a")
    other = KubeApi("https://127.0.0.1:1", "node-a", tls=api.http.tls)
    assert other.http.tls is api.http.tls and other.http is not api.http
    assert KubeApi("http://127.0.0.1:1", "node-a").http.tls is None


def test_the_factory_shares_tls_and_reads_both_tokens(tmp_path):
    (tmp_path / "node").write_text("node-token\n")
    (tmp_path / "taint").write_text("taint-token\n")
    config = build({"node": {"name": "node-a"}, "kubernetes": {
        "api_url": "https://127.0.0.1:1", "token_file": str(tmp_path / "node"),
        "taint_token_file": str(tmp_path / "taint")}})
    make = api_factory(config)
    a, b = make(), make()
    assert a.http.tls is b.http.tls
    assert a.headers["Authorization"] == "Bearer node-token"
    assert a.node_headers["Authorization"] == "Bearer taint-token"
    assert api_factory(build({"node": {"name": "n"}})) is None     # no api_url: no Kubernetes side


def test_identities_never_pair_a_certificate_with_a_token():
    from common.http import TlsFiles
    from executor.kube.identity import Identity, identities

    cert = TlsFiles("ca.pem", "node.crt", "node.key")
    node, taint = identities("node-token", "taint-token", cert)
    assert node == Identity("", cert)                                   # the certificate is the node
    assert taint == Identity("taint-token", TlsFiles(ca_file="ca.pem"))   # the token, and no certificate
    node, taint = identities("node-token", "", TlsFiles("ca.pem"))
    assert node == Identity("node-token", TlsFiles("ca.pem")) and taint is None


def test_the_factory_builds_a_certificate_connection_and_a_separate_token_connection(tmp_path):
    from tests.rigs.kube_real_rig import _make_pki, issue_client_cert

    _make_pki(tmp_path / "pki")
    crt, key = issue_client_cert(tmp_path / "pki", "n", "system:node:node-a", ("system:nodes",))
    (tmp_path / "node").write_text("node-token\n")
    (tmp_path / "taint").write_text("taint-token\n")
    config = build({"node": {"name": "node-a"}, "kubernetes": {
        "api_url": "https://127.0.0.1:1", "ca_file": str(tmp_path / "pki" / "ca.crt"),
        "client_cert_file": str(crt), "client_key_file": str(key), "token_file": str(tmp_path / "node"),
        "taint_token_file": str(tmp_path / "taint")}})
    make = api_factory(config)
    a, b = make(), make()
    assert "Authorization" not in a.headers                       # no token beside the certificate
    assert a.node_headers["Authorization"] == "Bearer taint-token"
    assert a.taint_http is not a.http and a.taint_http.tls is not a.http.tls
    assert a.http.tls is b.http.tls and a.taint_http.tls is b.taint_http.tls   # shared per identity
    assert a.taint_http.tls is not None and a.taint_http.tls.get_ca_certs()     # the CA, for the server
