"""One connection to the API server that never blocks (adapter: a socket, stdlib ``ssl``).

Made as ``http.client`` makes its connection -- the client's host and port, TCP_NODELAY, its
TLS context with the host as SNI -- but non-blocking: ``begin`` sends a request (connecting
first if need be) and each ``step`` goes as far as the socket allows -- connect, TLS handshake,
send, receive -- then returns; ``interest`` says what the selector must wait for before the
next step (``executor.kube.drain_io``). The bytes received go to an ``http_feed.ResponseFeed``.
"""
from __future__ import annotations

import errno
import os
import selectors
import socket
import ssl

from common.http import HttpClient
from executor.kube.http_feed import ResponseFeed

READ_MAX = 1 << 20        # bytes read from one socket per wake-up: the others get their turn


class Conn:
    """One connection to the API server that never blocks: each ``step`` goes as far as it can."""

    def __init__(self, http: HttpClient) -> None:
        self._host, self._port, self._tls = http.host, http.port, http.tls
        self.sock: socket.socket | None = None
        self.fd = -1
        self.stage = ""        # connect | handshake | send | recv
        self._want = selectors.EVENT_WRITE
        self._out = b""
        self.feed = ResponseFeed()
        self.eof = False

    def begin(self, request: bytes, feed: ResponseFeed) -> None:
        """Send ``request`` (connecting first if need be), its answer to ``feed``. Raises OSError."""
        self._out, self.feed, self.eof = request, feed, False
        if self.sock is not None:
            self.stage = "send"
            return
        family, kind, proto, _, addr = socket.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        self.sock, self.fd, self.stage = sock, sock.fileno(), "connect"
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # as http.client does
        err = sock.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            raise OSError(err, os.strerror(err))

    def interest(self) -> int:
        if self.stage in ("connect", "send"):
            return selectors.EVENT_WRITE
        return self._want if self.stage == "handshake" else selectors.EVENT_READ

    def step(self) -> None:
        """Raises OSError (no answer) or FeedError (not HTTP)."""
        if self.sock is None:
            raise ConnectionAbortedError("closed")
        if self.stage == "connect" and not self._connected(self.sock):
            return
        if self.stage == "handshake" and not self._handshake(self.sock):
            return
        if self.stage == "send" and not self._send(self.sock):
            return
        self._receive(self.sock)

    def _connected(self, sock: socket.socket) -> bool:
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))
        try:
            sock.getpeername()
        except OSError:
            return False   # still connecting
        if self._tls is not None:
            self.sock = self._tls.wrap_socket(sock, server_hostname=self._host, do_handshake_on_connect=False)
            self.stage = "handshake"
        else:
            self.stage = "send"
        return True

    def _handshake(self, sock: socket.socket) -> bool:
        if not isinstance(sock, ssl.SSLSocket):
            raise ConnectionAbortedError("a TLS handshake on a plain socket")
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._want = selectors.EVENT_READ
            return False
        except ssl.SSLWantWriteError:
            self._want = selectors.EVENT_WRITE
            return False
        self.stage = "send"
        return True

    def _send(self, sock: socket.socket) -> bool:
        while self._out:
            try:
                sent = sock.send(self._out)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return False
            self._out = self._out[sent:]
        self.stage = "recv"
        return True

    def _receive(self, sock: socket.socket) -> None:
        got = 0
        while got < READ_MAX and not (self.feed.complete or self.feed.refused or self.eof):
            try:
                data = sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            if not data:
                self.eof = True
                self.feed.closed()
                return
            got += len(data)
            self.feed.feed(data)
            if len(data) < 65536 and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                return   # drained (the selector is level-triggered: more later wakes it again)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.fd = None, -1
