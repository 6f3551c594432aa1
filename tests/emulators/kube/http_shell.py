"""The HTTP shell of the emulator: listeners and the request handler.

HTTP plumbing copies what a stdlib server needs to keep kubectl and keep-alive clients happy
(see the research notes): the request body is always read, TCP_NODELAY is set, the listen
backlog is large. Each API request is logged before it is answered, so a client that has its
answer finds the request in the log.
"""
from __future__ import annotations

import errno
import json
import socket
import struct
import sys
import threading
import traceback
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from . import control, protobuf
from .api import Request, Response
from .errors import status_body, unauthorized
from .watch import WatchRequest, watch_events

if TYPE_CHECKING:
    from .server import KubeApiServer

BACKLOG = 1024
_LOGGED_BODY_LIMIT = 8192


class Listener(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = BACKLOG
    allow_reuse_address = True

    def __init__(self, emu: KubeApiServer, control_only: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler, bind_and_activate=False)
        self.emu = emu
        self.control_only = control_only
        self.thread: threading.Thread | None = None

    def bind_explicit(self, host: str, port: int) -> None:
        """Bind to a concrete port even when asked for 0.

        A socket bound to an explicit port keeps it through ``shutdown()``, which is how the
        API port stops listening ("down", ECONNREFUSED) and comes back on the same number.
        """
        # SO_REUSEADDR also lets listen() succeed again while accepted connections linger.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for _ in range(50):
            chosen = port
            if port == 0:
                with socket.socket() as probe:
                    probe.bind((host, 0))
                    chosen = probe.getsockname()[1]
            try:
                self.socket.bind((host, chosen))
            except OSError as err:
                if port != 0 or err.errno != errno.EADDRINUSE:
                    raise
                continue
            self.server_address = self.socket.getsockname()
            self.server_activate()
            return
        raise OSError(errno.EADDRINUSE, "no free port found")

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # clients, faults and "down" drop connections: not worth a traceback
        super().handle_error(request, client_address)

    def serve_in_thread(self) -> None:
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1},
                                       name="kube-emu-http", daemon=True)
        self.thread.start()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-emulator"
    server: Listener

    def setup(self) -> None:
        super().setup()
        # Nagle + delayed ACK costs ~40 ms per keep-alive request without this.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.emu.track(self.connection, self.server.control_only, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass  # the connection was dropped on purpose (fault or "down")
        self.server.emu.track(self.connection, self.server.control_only, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _read_body(self) -> bytes:
        # Always consume the body, even for requests we refuse: leftover bytes would be parsed
        # as the next keep-alive request.
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _serve(self) -> None:
        emu = self.server.emu
        started = emu.clock()
        try:
            body = self._read_body()
        except ValueError:
            self.close_connection = True  # the framing is lost: nothing after this can be parsed
            self._send(400, status_body(400, "malformed request body framing"))
            return
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        headers = {k.lower(): v for k, v in self.headers.items()}
        if url.path.startswith("/_emu/") or url.path == "/_emu":
            self._send(*control.handle(emu, self.command, url.path, query, body))
            return
        if self.server.control_only:
            self._send(404, status_body(404, "the control port serves /_emu/ only"))
            return
        entry: dict[str, Any] = {"time": started, "method": self.command, "path": self.path,
                                 "content_type": headers.get("content-type", ""), "fault": None}
        if self.command not in ("GET", "HEAD") and body:
            entry["body"] = _loggable(body, entry["content_type"])
        entry["user"], authenticated = emu.authenticate(headers)
        self._answer(Request(self.command, url.path, query, headers, body), entry, authenticated)

    def _answer(self, req: Request, entry: dict[str, Any], authenticated: bool) -> None:
        """Serve one API request. The log entry is written before the answer, so a client
        that has its answer finds the request in the log."""
        emu = self.server.emu
        if emu.down_mode == "reset":
            emu.record(entry, 0)
            self._drop(rst=True)
            return
        epoch = emu.epoch
        rule = emu.faults.pick(self.command, self.path)
        if rule is not None:
            entry["fault"] = rule.action
            if rule.action in ("latency", "hang"):
                emu.stopping.wait(rule.seconds)
            if rule.action in ("hang", "close"):
                emu.record(entry, 0)
                self._drop(rst=False)
                return
            if rule.action == "error":
                doc = rule.body if rule.body is not None else status_body(rule.status, "injected fault")
                extra = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else {}
                emu.record(entry, rule.status)
                self._send(rule.status, doc, extra)
                return
        if not authenticated:
            err = unauthorized()
            emu.record(entry, err.code)
            self._send(err.code, err.status)
            return
        try:
            result = emu.api.handle(req)
        except Exception as err:  # noqa: BLE001 - an emulator bug must answer 500, not kill the connection
            traceback.print_exc(file=sys.stderr)
            result = Response(500, status_body(500, f"emulator error: {err!r}"))
        if isinstance(result, WatchRequest):
            entry["watch"] = True
            emu.record(entry, 200)
            self._stream(result, lambda: emu.stopping.is_set() or emu.epoch != epoch
                         or _peer_closed(self.connection))
            return
        emu.record(entry, result.code)
        self._send(result.code, result.body, result.headers)

    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        if isinstance(body, (dict, list)):
            data, ctype = json.dumps(body, separators=(",", ":")).encode(), "application/json"
        else:
            data, ctype = str(body).encode(), "text/plain; charset=utf-8"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-cache, private")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _stream(self, req: WatchRequest, stopped: Callable[[], bool]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        emu = self.server.emu
        try:
            for event in watch_events(emu.store, req, emu.clock, stopped):
                data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    def _drop(self, rst: bool) -> None:
        """End the connection without an answer: RST (refused) or a plain close (FIN)."""
        self.close_connection = True
        try:
            if rst:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

def _loggable(body: bytes, content_type: str) -> Any:
    """A request body as tests want to read it: parsed JSON (protobuf decoded), else text."""
    if content_type.startswith(protobuf.CONTENT_TYPE):
        try:
            return protobuf.decode(body)
        except ValueError:
            return f"<protobuf, {len(body)} bytes>"
    try:
        return json.loads(body[:_LOGGED_BODY_LIMIT])
    except ValueError:
        return body[:_LOGGED_BODY_LIMIT].decode("utf-8", "replace")

def _peer_closed(conn: socket.socket) -> bool:
    """True once the client hung up, so an idle watch does not outlive its client."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True

def shutdown_quietly(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
