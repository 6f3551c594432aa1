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
