"""One Kubernetes watch over its own blocking connection, in a thread of its own (adapter; stdlib
``http.client``): what bench/fleet_cluster.py's observer reads every pod of the cluster with. The
agent's drains do not use it: their watches are served by the drain's one thread (``drain_io``).

A watch is a GET with ``watch=1`` that the server answers with ``200`` and then keeps open:
``Transfer-Encoding: chunked``, one JSON object per line, ``{"type": ADDED | MODIFIED |
DELETED | BOOKMARK | ERROR, "object": ...}``, until ``timeoutSeconds`` passes and the server
ends the response (Kubernetes API concepts, "Efficient detection of changes"). An expired
resourceVersion comes as an ERROR event whose object is a Status with code 410.

``common.http.HttpClient`` reads whole bodies under one deadline, which a watch never ends
within, so the watch has a connection of its own here: same host, TLS context and headers,
a socket timeout per read (``read_timeout_s``, longer than ``timeoutSeconds`` so a healthy
quiet watch is never cut), a bounded line length, and ``close`` from any thread to end it.
"""
from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from typing import Any

from common.http import HttpClient
from executor.kube.http_feed import watch_event

MAX_EVENT_BYTES = 4 << 20   # one pod is a few KiB; a line longer than this is not a pod event


class WatchStream:
    def __init__(self, client: HttpClient, path: str, headers: dict[str, str], read_timeout_s: float,
                 connect_timeout_s: float | None = None) -> None:
        self._client = client
        self._path = path
        self._headers = dict(headers)
        self._read_timeout = read_timeout_s
        self._connect_timeout = connect_timeout_s or client.timeout_s
        self._conn: http.client.HTTPConnection | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.refused = ""   # why the stream was ended on a line that is not an event ("" if it was not)

    def open(self) -> tuple[int, dict[str, str], bytes]:
        """Send the GET; (status, lower-cased headers, body if not 200). Raises OSError / HTTPException."""
        c = self._client
        tls = c.tls
        conn: http.client.HTTPConnection
        if tls is not None:
            conn = http.client.HTTPSConnection(c.host, c.port, timeout=self._connect_timeout, context=tls)
        else:
            conn = http.client.HTTPConnection(c.host, c.port, timeout=self._connect_timeout)
        with self._lock:
            if self._closed:
                raise ConnectionAbortedError("watch closed")
            self._conn = conn
        try:
            conn.request("GET", c.prefix + self._path, headers=self._headers)
            if conn.sock is not None:
                conn.sock.settimeout(self._read_timeout)
            resp = conn.getresponse()
        except http.client.HTTPException as e:
            raise ConnectionError(f"{type(e).__name__}: {e}") from None
        self._resp = resp
        headers = {k.lower(): v for k, v in resp.getheaders()}
        if resp.status != 200:
            return resp.status, headers, resp.read(1 << 16)
        return 200, headers, b""

    def events(self) -> Iterator[dict[str, Any]]:
        """The events until the server ends the watch; a broken stream just ends it (the caller
        starts a new watch from the last resourceVersion it saw)."""
        resp = self._resp
        if resp is None:
            return
        while True:
            try:
                line = resp.readline(MAX_EVENT_BYTES + 1)
            except (OSError, ValueError, AttributeError, http.client.HTTPException):
                # AttributeError: http.client's own race when close() ran in another thread.
                return
            if not line:
                return
            if len(line) > MAX_EVENT_BYTES:
                self.refused = f"a line over {MAX_EVENT_BYTES} bytes"
                return
            if not line.endswith(b"\n"):
                return   # cut short: the server or the connection ended mid-event; resume from here
            event, self.refused = watch_event(line)
            if event is None:
                return
            yield event

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)   # wakes a read blocked in another thread
            except OSError:
                pass
        if conn is not None:
            conn.close()
