"""The HTTP shell: listeners, the request handler, faults, the request log, watch streaming.

Two listeners on 127.0.0.1: the API port (the Kubernetes API and ``/_emu/``) and a control
port (``/_emu/`` only) that stays up while the API port is made to refuse connections.
HTTP plumbing copies what a stdlib server needs to keep kubectl and keep-alive clients happy
(see the research notes): the request body is always read, TCP_NODELAY is set, the listen
backlog is large.
"""
from __future__ import annotations

import errno
import json
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qsl, urlsplit

from . import control, protobuf
from .api import Api, Request, Response
from .controllers import Controllers
from .errors import status_body, unauthorized
from .faults import Faults, RequestLog
from .options import Options, with_changes
from .store import Store
from .watch import WatchRequest, watch_events

BACKLOG = 1024
_LOGGED_BODY_LIMIT = 8192


class _Listener(ThreadingHTTPServer):
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
    server: _Listener

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


class KubeApiServer:
    """An emulated Kubernetes API server; ``start()`` binds and serves, ``stop()`` ends it all.

    ``run_controllers=False`` leaves the simulated kubelet and controllers to the caller
    (``controllers.run_once()``), for tests that must step the cluster deterministically.
    """

    def __init__(self, port: int = 0, options: Options | None = None,
                 clock: Callable[[], float] = time.time, run_controllers: bool = True) -> None:
        self.clock = clock
        self._run_controllers = run_controllers
        self.initial_options = options or Options()
        self._options = self.initial_options
        self._requested_port = port
        self.store = Store(clock, history=self._options.history)
        self.faults = Faults(self._options.fault_seed)
        self.log = RequestLog()
        self.controllers = Controllers(self.store, lambda: self._options, clock)
        self.api = Api(self.store, lambda: self._options, lambda: f"127.0.0.1:{self.port}", clock)
        self.stopping = threading.Event()
        self.down_mode: str | None = None
        self.epoch = 0  # bumped when the API port goes down: running watches end
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._up_timer: threading.Timer | None = None
        self._api = _Listener(self, control_only=False)
        self._control = _Listener(self, control_only=True)

    # ----- lifecycle -----
    def start(self) -> KubeApiServer:
        self._api.bind_explicit("127.0.0.1", self._requested_port)
        self._control.bind_explicit("127.0.0.1", 0)
        self._api.serve_in_thread()
        self._control.serve_in_thread()
        if self._run_controllers:
            self.controllers.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.store.close()
        self.controllers.stop()
        if self._up_timer is not None:
            self._up_timer.cancel()
        for listener in (self._api, self._control):
            if listener.thread is not None:
                listener.shutdown()
            listener.server_close()
        with self._lock:
            for conn in list(self._conns):
                _shutdown(conn)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self._api.server_address[1])

    @property
    def control_port(self) -> int:
        return int(self._control.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"

    # ----- settings, auth, log -----
    @property
    def options(self) -> Options:
        return self._options

    def set_options(self, changes: dict[str, Any]) -> Options:
        self._options = with_changes(self._options, changes)
        return self._options

    def authenticate(self, headers: dict[str, str]) -> tuple[str | None, bool]:
        """(user, accepted): with no token map every request is accepted anonymously."""
        tokens = self._options.tokens
        auth = headers.get("authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if not tokens:
            return None, True
        if token is not None and token in tokens:
            return tokens[token], True
        return None, False

    def record(self, entry: dict[str, Any], status: int) -> None:
        entry["status"] = status
        entry["duration"] = round(self.clock() - entry["time"], 6)
        self.log.append(entry)

    @property
    def open_connections(self) -> int:
        """API connections currently open (watches included)."""
        with self._lock:
            return len(self._conns)

    def track(self, conn: socket.socket, control_only: bool, add: bool) -> None:
        if control_only:
            return
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    # ----- whole-cluster operations -----
    def reset(self) -> None:
        """Back to a fresh cluster: objects, faults, log and settings as at start; API port up."""
        self.up()
        self._options = self.initial_options
        self.faults.clear()
        self.store.reset()
        self.log.clear()

    def down(self, mode: str = "refuse", seconds: float | None = None) -> None:
        """``refuse``: the API port stops listening (ECONNREFUSED). ``reset``: connections are
        accepted and reset unanswered. Either way running requests and watches are cut."""
        if mode not in ("refuse", "reset"):
            raise ValueError("mode must be 'refuse' or 'reset'")
        self.up()
        with self._lock:
            self.down_mode = mode
            self.epoch += 1
            if mode == "refuse":
                self._api.shutdown()
                self._api.socket.shutdown(socket.SHUT_RDWR)
            for conn in list(self._conns):
                _shutdown(conn)
        if seconds is not None:
            self._up_timer = threading.Timer(seconds, self.up)
            self._up_timer.daemon = True
            self._up_timer.start()

    def up(self) -> None:
        with self._lock:
            if self._up_timer is not None:
                self._up_timer.cancel()
                self._up_timer = None
            if self.down_mode == "refuse" and not self.stopping.is_set():
                self._api.socket.listen(BACKLOG)
                self._api.serve_in_thread()
            self.down_mode = None


def _peer_closed(conn: socket.socket) -> bool:
    """True once the client hung up, so an idle watch does not outlive its client."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


__all__ = ["KubeApiServer", "Response"]
