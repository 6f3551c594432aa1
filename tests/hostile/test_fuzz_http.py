"""Hostile HTTP peers on the wire: any status line, any headers, any body, for both HTTP clients.

``common.http.HttpClient`` (metadata, Kubernetes, Vector) and
``watcher.contract_fetch.fetch`` (the contract bundle) talk to a real loopback
server that writes drawn raw bytes. Each call ends in a response, or in the
client's own bounded error -- never in an exception the caller does not expect,
and a second call (carrying e.g. the ETag the first one got) works too.
"""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from common.http import HttpClient, HttpError
from tests.support.fuzzing import fuzz
from watcher.contract_fetch import fetch
from watcher.contract_verify import REASONS


class RawServer:
    """Accepts connections and answers each request with ``reply`` (raw bytes), then closes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.reply = b""
        self.requests: list[bytes] = []
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    self.requests.append(data)
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture(scope="module")
def server() -> Iterator[RawServer]:
    srv = RawServer()
    yield srv
    srv.close()


header_values = st.sampled_from(["0", "5", "²", "-1", "99999999999999999999", " 12 ", "abc\x0bdef",
                                 '"v1"', "W/\"x\"", "\x7f\xff"]) | st.text(max_size=30).filter(
                                     lambda t: "\r" not in t and "\n" not in t)
status_lines = st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 304 Not Modified", b"HTTP/1.1 404 Nope",
                                b"HTTP/1.0 500 X", b"HTTP/1.1 999 Odd", b"HTTP/1.1 abc", b"HTTP/9 200",
                                b"garbage"]) | st.binary(max_size=20)
heads = st.lists(st.tuples(st.sampled_from(["Content-Length", "ETag", "Transfer-Encoding", "Connection",
                                            "Retry-After", "X"]), header_values), max_size=4)


def raw(status: bytes, headers: list[tuple[str, str]], body: bytes) -> bytes:
    # Latin-1, as http.client decodes header bytes: "²" arrives as "²".
    lines = [status] + [f"{k}: {v}".encode("latin-1", "replace") for k, v in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


replies = st.builds(raw, status_lines, heads, st.binary(max_size=200)) | st.binary(max_size=300)


@fuzz(150)
@given(replies)
@example(raw(b"HTTP/1.1 200 OK", [("Content-Length", "²")], b"{}"))   # found: int('²') escaped as ValueError
def test_http_client(server, reply):
    server.reply = reply
    client = HttpClient(server.url, timeout_s=2.0, max_body=100)
    for _ in range(2):
        try:
            resp = client.request("GET", "/x", headers={"A": "b"})
        except HttpError as e:
            assert e.reason in ("timeout", "refused", "too_large", "error")
            continue
        assert len(resp.body) <= 100 and isinstance(resp.status, int)
    client.close()


@fuzz(150)
@given(replies)
@example(raw(b"HTTP/1.1 200 OK", [("Content-Length", "²")], b"{}"))
@example(raw(b"HTTP/1.1 200 OK", [("ETag", "\x7f\xff"), ("Content-Length", "2")], b"{}"))
@example(raw(b"HTTP/1.1 200 OK", [("ETag", "a\x0bb"), ("Content-Length", "2")], b"{}"))
def test_contract_fetch(server, reply):
    """A fetch is a FetchResult (a body, a 304, or a REASONS code); the ETag it keeps can be sent back."""
    server.reply = reply
    etag = None
    for _ in range(2):
        result = fetch(server.url + "/bundle.json", etag, timeout_s=2.0, limit=100)
        assert result.error is None or result.error in REASONS, result
        assert result.body is None or len(result.body) <= 100
        etag = result.etag
