"""The imperative shell every emulator runs in: threaded HTTP, faults, request log.

Two listeners: the service port (what the agent talks to; it can be closed and
reopened on the same port to look like a stopped service) and a control port
that only answers ``/_emu/`` and stays up whatever the test does to the other.
``/_emu/`` is answered on the service port too, while it listens.

Each request is in the request log before its answer (or hang-up) goes out, as in the
Kubernetes emulator: a test that has its answer reads the log at once, no waiting and no race.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from tests.emulators._control import BadCommand, Command, field, run_command
from tests.emulators._faults import GARBAGE, FaultRule, FaultTable, parse_rule
from tests.emulators._http import CONTROL_PREFIX, Request, Response, text_response

MAX_REQUEST_BODY = 32 * 1024 * 1024
LOG_LIMIT = 20_000
_FILLER = memoryview(b"x" * (256 * 1024))


class EmulatorApp(Protocol):
    """What an emulator provides; the server does the rest."""

    logged_headers: tuple[str, ...]

    def handle(self, request: Request) -> Response: ...

    def commands(self) -> Mapping[str, Command]: ...

    def reset(self) -> None: ...

    def now(self) -> float: ...

    def close(self) -> None: ...


class EmulatorServer:
    """Serves one app on loopback until ``stop()``; binds in the constructor."""

    def __init__(self, app: EmulatorApp, host: str = "127.0.0.1", port: int = 0,
                 seed: int | None = None) -> None:
        self.app = app
        self.host = host
        self.faults = FaultTable(seed)
        self.stopping = threading.Event()
        self._log: deque[dict[str, Any]] = deque(maxlen=LOG_LIMIT)
        self._log_lock = threading.Lock()
        self._listen_lock = threading.Lock()
        self._data: _Listener | None = _Listener((host, port), self, control_only=False)
        self.port: int = self._data.server_address[1]
        try:
            self._control = _Listener((host, 0), self, control_only=True)
        except OSError:
            self._data.server_close()
            raise
        self._commands: dict[str, Command] = {**app.commands(), **self._own_commands()}
        self._serving: list[_Listener] = []

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://{self.host}:{self._control.server_address[1]}"

    def start(self) -> EmulatorServer:
        self._serve(self._control)
        if self._data is not None:
            self._serve(self._data)
        return self

    def stop(self) -> None:
        """Stop both listeners, wake every waiting handler, cut open connections."""
        self.stopping.set()
        self.app.close()
        with self._listen_lock:
            listeners = [self._control] + ([self._data] if self._data else [])
            self._data = None
        # Close the listeners side by side: each waits up to one poll interval.
        closers = [threading.Thread(target=self._close, args=(listener,))
                   for listener in listeners]
        for closer in closers:
            closer.start()
        for closer in closers:
            closer.join()

    def set_listening(self, enabled: bool) -> bool:
        """Close (refuse connections) or reopen the service port; returns the new state."""
        with self._listen_lock:
            if self.stopping.is_set():
                raise BadCommand("emulator is stopping")
            if not enabled and self._data is not None:
                listener, self._data = self._data, None
                self._close(listener)
            elif enabled and self._data is None:
                try:
                    self._data = _Listener((self.host, self.port), self, control_only=False)
                except OSError as exc:
                    raise BadCommand(f"cannot listen on port {self.port} again: {exc}") from None
                self._serve(self._data)
            return self._data is not None

    def control(self, request: Request) -> Response:
        return run_command(self._commands, request)

    def record(self, request: Request, status: int | None, fault: FaultRule | None) -> None:
        headers = {name: request.headers[name] for name in self.app.logged_headers
                   if name in request.headers}
        entry = {"t": self.app.now(), "method": request.method, "path": request.path,
                 "query": dict(request.query), "headers": headers, "status": status,
                 "fault": fault.mode if fault else None}
        with self._log_lock:
            self._log.append(entry)

    def requests(self, path: str = "") -> list[dict[str, Any]]:
        with self._log_lock:
            return [entry for entry in self._log if entry["path"].startswith(path)]

    def _own_commands(self) -> dict[str, Command]:
        def reset(_: dict[str, Any]) -> None:
            self.app.reset()
            self.faults.clear()
            with self._log_lock:
                self._log.clear()

        def clear_log(_: dict[str, Any]) -> None:
            with self._log_lock:
                self._log.clear()

        return {
            "ping": lambda _: {"pid": os.getpid(), "now": self.app.now(),
                               "listening": self._data is not None},
            "reset": reset,
            "fault": lambda body: self.faults.add(parse_rule(body)),
            "faults": lambda _: self.faults.rules(),
            "faults/clear": lambda _: self.faults.clear(),
            "requests": lambda body: self.requests(field(body, "path", str, "")),
            "requests/clear": clear_log,
            "listen": lambda body: {"listening": self.set_listening(field(body, "enabled", bool))},
        }

    def _serve(self, listener: _Listener) -> None:
        thread = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.02},
                                  name=f"emulator:{listener.server_address[1]}", daemon=True)
        thread.start()
        self._serving.append(listener)

    def _close(self, listener: _Listener) -> None:
        if listener in self._serving:
            listener.shutdown()  # only a started loop can be waited for
            self._serving.remove(listener)  # list.remove: atomic under the GIL
        listener.server_close()
        listener.drop_connections()


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a hung handler must not hold up stop()

    def __init__(self, address: tuple[str, int], owner: EmulatorServer, control_only: bool) -> None:
        self.owner = owner
        self.control_only = control_only
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, conn: socket.socket, present: bool) -> None:
        with self._connections_lock:
            if present:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def drop_connections(self) -> None:
        """A stopped service resets its clients too, not only its listening socket."""
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            _shutdown(conn)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the body of an answer on a
    # kept-alive connection waits for the client's delayed ACK (~40 ms on Linux).
    disable_nagle_algorithm = True
    server: _Listener
    _server_name = "emulator"
    _unlogged: tuple[Request, FaultRule | None] | None = None   # the request being answered

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def version_string(self) -> str:
        return self._server_name

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the emulator keeps its own request log."""

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def _serve(self) -> None:
        owner = self.server.owner
        request = self._read()
        if request is None:
            return
        if request.path.startswith(CONTROL_PREFIX):
            self._guarded(lambda: self._write(owner.control(request)))
            return
        if self.server.control_only:
            self._guarded(lambda: self._write(text_response(404, "control port: /_emu/ only\n")))
            return
        fault = owner.faults.take(request.method, request.path)
        self._unlogged = (request, fault)
        status = self._guarded(lambda: self._run(request, fault))
        self._log(status)   # only if no answer went out (the write failed before the headers)

    def _log(self, status: int | None) -> None:
        """Put the request in the log, once, before its answer (or hang-up) goes out: a client
        that has its answer -- or its connection error -- always finds the request in the log.
        ``status`` is the answer's status; None when the emulator answered nothing."""
        if self._unlogged is not None:
            (request, fault), self._unlogged = self._unlogged, None
            self.server.owner.record(request, status, fault)

    def _guarded(self, action: Callable[[], int | None]) -> int | None:
        """Run a write; a client that went away only ends this connection."""
        try:
            return action()
        except OSError:
            self.close_connection = True
            return None

    def _read(self) -> Request | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self._refuse(411, "send a Content-Length\n")
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_REQUEST_BODY:
            self._refuse(400 if length < 0 else 413, "bad or oversized body\n")
            return None
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            self.close_connection = True
            return None
        split = urlsplit(self.path)
        query: dict[str, str] = {}
        for name, value in parse_qsl(split.query, keep_blank_values=True):
            query.setdefault(name, value)
        headers = {name.lower(): value for name, value in self.headers.items()}
        return Request(self.command, split.path, query, headers, body)

    def _refuse(self, status: int, message: str) -> None:
        self.close_connection = True
        self._guarded(lambda: self._write(text_response(status, message)))

    def _run(self, request: Request, fault: FaultRule | None) -> int | None:
        owner = self.server.owner
        mode = fault.mode if fault else None
        if fault is not None and mode in ("delay", "hang"):
            interrupted = owner.stopping.wait(fault.seconds)
            if mode == "hang" or interrupted:
                return self._drop()
        if fault is None or mode in ("delay", "status_after"):
            response = _handle_safely(owner.app, request)
            if fault is not None and mode == "status_after" and response.status < 300:
                response = _fault_response(fault)
            return self._write(response)
        if mode == "status":
            return self._write(_fault_response(fault))
        if mode == "huge":
            return self._stream_huge(fault)
        if mode == "garbage":
            body = fault.body.encode() if fault.body is not None else GARBAGE
            return self._write(Response(200, body, (("Content-Type", "application/json"),)))
        if mode == "short":
            return self._write_short()
        return self._drop()  # "close"

    def _write(self, response: Response) -> int:
        self._server_name = response.server
        self.send_response(response.status)
        for name, value in response.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self._log(response.status)
        self.end_headers()
        self.wfile.write(response.body)
        return response.status

    def _drop(self) -> None:
        self._log(None)
        self.close_connection = True
        _shutdown(self.connection)

    def _stream_huge(self, fault: FaultRule) -> int:
        """``fault.size`` bytes from one reused buffer: memory stays flat whatever the size."""
        stopping = self.server.owner.stopping
        self._server_name = "emulator"
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if fault.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(fault.size))
        self._log(200)
        self.end_headers()
        remaining = fault.size
        while remaining > 0 and not stopping.is_set():
            piece = _FILLER[:min(remaining, len(_FILLER))]
            if fault.chunked:
                self.wfile.write(b"%x\r\n" % len(piece))
            self.wfile.write(piece)
            if fault.chunked:
                self.wfile.write(b"\r\n")
            remaining -= len(piece)
        if fault.chunked and remaining == 0:
            self.wfile.write(b"0\r\n\r\n")
        return 200

    def _write_short(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "4096")
        self._log(None)   # cut short: no answer a client can use
        self.end_headers()
        self.wfile.write(b'{"action": "term')
        return self._drop()


def _handle_safely(app: EmulatorApp, request: Request) -> Response:
    """An emulator bug answers 500 with its traceback on stderr, never a silent hang-up."""
    try:
        return app.handle(request)
    except Exception as exc:  # noqa: BLE001 - reported (stderr + 500), not swallowed
        traceback.print_exc(file=sys.stderr)
        return text_response(500, f"emulator error: {type(exc).__name__}: {exc}\n")


def _fault_response(fault: FaultRule) -> Response:
    body = fault.body if fault.body is not None else f"{fault.status} injected fault\n"
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "text/plain"),)
    if fault.retry_after is not None:
        headers += (("Retry-After", fault.retry_after),)
    return Response(fault.status, body.encode(), headers)


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
