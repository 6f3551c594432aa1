"""Strict X.509 on every interpreter (common/http.py STRICT_X509; docs/reliability.md#strict-certificates).

Python 3.13's ``ssl.create_default_context()`` sets VERIFY_X509_STRICT; 3.11 and 3.12 do not. The
agent sets it everywhere, so the same certificate is accepted or refused on every node image, and a
refusal that only the strict checks make says which extension is missing -- the operator's fix --
instead of a bare "certificate verify failed". The relay's side (a real nats-server) is in
tests/watcher/test_relay.py.
"""
from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from common.http import STRICT_X509, HttpClient, HttpError, TlsFiles, strict_refusal, tls_context
from tests.support import pki


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def _https_server(tmp_path: Path, rfc5280: bool) -> Iterator[tuple[str, str]]:
    ca = pki.ca("strict-test-ca", ec.generate_private_key(ec.SECP256R1()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = pki.leaf(pki.name("server"), key, ca, (pki.SERVER,), pki.LOOPBACK_SANS, rfc5280=rfc5280)
    (tmp_path / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "server-key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "server.pem", tmp_path / "server-key.pem")
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", str(tmp_path / "ca.pem")
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def legacy_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A server whose certificate lacks AKI, SKI and keyUsage (a hand-rolled CA's)."""
    yield from _https_server(tmp_path, rfc5280=False)


@pytest.fixture
def rfc5280_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield from _https_server(tmp_path, rfc5280=True)


def test_every_context_the_agent_builds_verifies_strictly_whatever_the_interpreter():
    assert tls_context().verify_flags & STRICT_X509 == STRICT_X509


def test_a_certificate_without_rfc5280_extensions_is_refused_naming_what_is_missing(legacy_server):
    url, ca_file = legacy_server
    client = HttpClient(url, timeout_s=5, tls=TlsFiles(ca_file=ca_file))
    with pytest.raises(HttpError) as refused:
        client.request("GET", "/")
    assert (refused.value.reason, refused.value.cause) == ("error", "tls")   # counted as a TLS refusal
    assert "strict X.509" in refused.value.detail
    assert "Missing Authority Key Identifier" in refused.value.detail         # the extension to add
    assert "docs/reliability.md#strict-certificates" in refused.value.detail


def test_the_same_server_with_rfc5280_extensions_is_accepted(rfc5280_server):
    url, ca_file = rfc5280_server
    answer = HttpClient(url, timeout_s=5, tls=TlsFiles(ca_file=ca_file)).request("GET", "/")
    assert (answer.status, answer.body) == (200, b"ok")


def test_other_verification_failures_keep_their_own_text(legacy_server):
    """A CA that did not sign the certificate is no strict-only refusal: no extension is named."""
    url, _ = legacy_server
    with pytest.raises(HttpError) as refused:
        HttpClient(url, timeout_s=5).request("GET", "/")   # the system store: unknown issuer
    assert refused.value.cause == "tls"
    assert "strict" not in refused.value.detail
    assert "unable to get local issuer certificate" in refused.value.detail


def test_the_refusal_is_found_under_the_wrappers_of_nats_py_and_asyncio():
    inner = ssl.SSLCertVerificationError(1, "certificate verify failed")
    inner.verify_code, inner.verify_message = 85, "Missing Authority Key Identifier"
    try:
        try:
            raise inner
        except ssl.SSLError as e:
            raise ConnectionError("nats: connect failed") from e
    except ConnectionError as outer:
        assert "Missing Authority Key Identifier" in strict_refusal(outer)
    assert strict_refusal(ValueError("no")) == ""
