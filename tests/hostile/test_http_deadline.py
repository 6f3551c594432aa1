"""common.http: one deadline bounds the whole exchange, however slowly a peer drips its answer.

A real loopback server sends its reply one byte every 0.5 s: each byte comes well
inside any per-read timeout, so only a deadline on the whole exchange (status
line, headers and body alike) ends the call. The server counts what it sent
before the client hung up, which shows the client stopped reading, not the server
writing.
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from common.http import HttpClient, HttpError

DRIP_S = 0.5
BODY_DRIPS = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100
HEADERS_DRIP = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"y" * 100 + b"\r\nContent-Length: 0\r\n\r\n"


class DrippingServer:
    """Answers one request with ``reply``, one byte every ``drip_s``, until done or the client hangs up."""

    def __init__(self, reply: bytes, drip_s: float) -> None:
        self.reply = reply
        self.drip_s = drip_s
        self.sent = 0
        self.hung_up = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            try:
                for i in range(len(self.reply)):
                    conn.sendall(self.reply[i:i + 1])
                    self.sent += 1
                    # A hang-up shows as EOF on our side (the client sends nothing else).
                    conn.settimeout(self.drip_s)
                    try:
                        if conn.recv(1) == b"":
                            raise ConnectionResetError
                    except TimeoutError:
                        pass
            except OSError:
                self.hung_up.set()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def drip() -> Iterator[type[DrippingServer]]:
    servers: list[DrippingServer] = []

    def start(reply: bytes, drip_s: float = DRIP_S) -> DrippingServer:
        servers.append(DrippingServer(reply, drip_s))
        return servers[-1]
    yield start   # type: ignore[misc]
    for s in servers:
        s.close()


@pytest.mark.parametrize("reply", [BODY_DRIPS, HEADERS_DRIP], ids=["body", "headers"])
def test_a_dripping_answer_is_cut_at_the_deadline(drip, reply: bytes) -> None:
    """The whole reply would take 60 s at one byte per 0.5 s; the call ends at its 2 s deadline."""
    srv = drip(reply)
    client = HttpClient(srv.url, timeout_s=2.0)
    started = time.monotonic()
    with pytest.raises(HttpError) as err:
        client.request("GET", "/")
    took = time.monotonic() - started
    assert err.value.reason == "timeout", err.value
    assert srv.hung_up.wait(10), "the client kept the connection past its deadline"
    # Cut while the server still had most of the reply to send (2 s is about 4 bytes).
    assert srv.sent < len(reply) // 2, srv.sent
    assert took < 10, took   # far below the 60 s the drip would last; not a speed check


def test_a_reply_within_the_deadline_is_read_whole(drip) -> None:
    """The deadline cuts only what is late: a reply dripped well inside it arrives whole."""
    srv = drip(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", drip_s=0.001)
    resp = HttpClient(srv.url, timeout_s=60.0).request("GET", "/")
    assert (resp.status, resp.body) == (200, b"ok")


def test_a_body_shorter_than_its_length_is_an_error(drip) -> None:
    """http.client returns a short body at EOF; the client says so instead of passing it on."""
    srv = drip(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nok", drip_s=0.001)
    with pytest.raises(HttpError) as err:
        HttpClient(srv.url, timeout_s=60.0).request("GET", "/")
    assert (err.value.reason, err.value.cause) == ("error", "truncated")
