"""The request handler of the shared shell: read, pick a fault, answer, log.

HTTP plumbing that keep-alive clients (kubectl, the agent) need from a stdlib server, as
measured while building the Kubernetes emulator: the whole request body is read (leftover
bytes would be parsed as the next request), TCP_NODELAY is set (Nagle + delayed ACK cost
~40 ms per kept-alive request), and each service request is logged before its answer goes
out, so a client that has its answer finds the request in the log.
"""
from __future__ import annotations

import dataclasses
import json
import socket
import struct
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from tests.emulators._faults import GARBAGE, FaultRule
from tests.emulators._http import CONTROL_PREFIX, Request, Response

if TYPE_CHECKING:
    from tests.emulators._app import EmulatorApp
    from tests.emulators._server import EmulatorServer, Listener

MAX_REQUEST_BODY = 32 * 1024 * 1024
_FILLER = memoryview(b"x" * (256 * 1024))
# What a service that is down in "reset" mode does to every request.
_DOWN_RESET = FaultRule(mode="reset")
# Fault modes whose answer (or its absence) the shell makes without the app.
_OWN_ANSWERS = ("close", "reset", "huge", "short")


class _Unreadable(Exception):
    """A request whose framing cannot be trusted: answered ``status`` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the body of an answer on a
    # kept-alive connection waits for the client's delayed ACK (~40 ms on Linux).
    disable_nagle_algorithm = True
    server: Listener
    _server_name = "emulator"

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass  # the connection was dropped on purpose (a fault, "down", stop)
        finally:
            self.server.track(self.connection, False)

    def version_string(self) -> str:
        return self._server_name

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the emulator keeps its own request log."""

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def _serve(self) -> None:
        owner = self.server.owner
        request = self._read(owner.app)
        if request is None:
            return
        if request.path.startswith(CONTROL_PREFIX):
            self._guarded(lambda: self._write(request, owner.control(request)))
            return
        if self.server.control_only:
            answer = owner.app.error_response(404, "control port: /_emu/ only")
            self._guarded(lambda: self._write(request, answer))
            return
        self._guarded(lambda: self._answer(owner, request))

    def _guarded(self, action: Callable[[], None]) -> None:
        """Run a write; a client that went away only ends this connection."""
        try:
            action()
        except OSError:
            self.close_connection = True

    # -- reading -----------------------------------------------------------------------

    def _read(self, app: EmulatorApp) -> Request | None:
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        try:
            if chunked and not app.chunked_requests:
                raise _Unreadable(411, "send a Content-Length")
            body = self._read_chunked() if chunked else self._read_sized()
        except _Unreadable as exc:
            self._refuse(app, exc.status, str(exc))
            return None
        if body is None:  # the client sent less than it announced and went away
            self.close_connection = True
            return None
        split = urlsplit(self.path)
        query: dict[str, str] = {}
        for name, value in parse_qsl(split.query, keep_blank_values=True):
            query.setdefault(name, value)
        headers = {name.lower(): value for name, value in self.headers.items()}
        return Request(self.command, split.path, query, headers, body, self.path)

    def _read_sized(self) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            raise _Unreadable(400, "malformed Content-Length")
        if length > MAX_REQUEST_BODY:
            raise _Unreadable(413, "request body too large")
        body = self.rfile.read(length) if length else b""
        return body if len(body) == length else None

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
            except ValueError:
                size = -1
            if size < 0:
                raise _Unreadable(400, "malformed request body framing")
            if size == 0:
                while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            total += size
            if total > MAX_REQUEST_BODY:
                raise _Unreadable(413, "request body too large")
            chunks.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def _refuse(self, app: EmulatorApp, status: int, message: str) -> None:
        """Answer without serving and close: the request framing cannot be trusted."""
        self.close_connection = True
        answer = app.error_response(status, message)
        answer = dataclasses.replace(answer, headers=(*answer.headers, ("Connection", "close")))
        self._guarded(lambda: self._write(None, answer))
        _linger(self.connection)

    # -- answering ---------------------------------------------------------------------

    def _answer(self, owner: EmulatorServer, request: Request) -> None:
        app = owner.app
        started = app.now()
        user, accepted = app.authenticate(request)
        entry: dict[str, Any] = {**app.log_fields(request), "time": started,
                                 "method": request.method, "path": request.path,
                                 "query": dict(request.query), "user": user,
                                 "headers": {name: request.headers[name] for name in app.logged_headers
                                             if name in request.headers}}
        if owner.down_mode == "reset":
            fault: FaultRule | None = _DOWN_RESET
        else:
            fault = owner.faults.take(request.method, request.path, request.target)

        def record(status: int | None, streamed: bool = False) -> None:
            entry.update(status=status, fault=fault.mode if fault else None,
                         duration=round(app.now() - started, 6))
            if streamed:
                entry["stream"] = True
            owner.log.append(entry)

        # A delay the server's stop cuts short is not answered either.
        if fault is not None and fault.mode in ("delay", "hang") and (
                owner.stopping.wait(fault.seconds) or fault.mode == "hang"):
            record(None)
            self._drop()
            return
        if fault is not None and fault.mode in _OWN_ANSWERS:
            self._misbehave(fault, record)
            return
        response = self._response(app, request, accepted, fault)
        record(response.status, response.stream is not None)
        self._write(request, response)

    def _misbehave(self, fault: FaultRule, record: Callable[[int | None], None]) -> None:
        """No answer at all, or one the client cannot use: a huge or a short body."""
        if fault.mode in ("close", "reset"):
            record(None)
            self._drop(rst=fault.mode == "reset")
        elif fault.mode == "huge":
            record(200)
            self._stream_huge(fault)
        else:
            record(None)
            self._write_short()

    def _response(self, app: EmulatorApp, request: Request, accepted: bool,
                  fault: FaultRule | None) -> Response:
        mode = fault.mode if fault else None
        if fault is not None and mode == "status":
            return _fault_response(app, fault)
        if fault is not None and mode == "garbage":
            body = fault.body.encode() if isinstance(fault.body, str) else GARBAGE
            return Response(200, body, (("Content-Type", "application/json"),))
        response = _handle_safely(app, request) if accepted else app.error_response(401, "Unauthorized")
        if fault is not None and mode == "status_after" and response.status < 300:
            return _fault_response(app, fault)
        return response

    def _write(self, request: Request | None, response: Response) -> None:
        self._server_name = response.server
        self.send_response(response.status)
        for name, value in response.headers:
            self.send_header(name, value)
        if response.stream is not None:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._write_chunks(response.stream(self._stopped))
            return
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if request is None or request.method != "HEAD":
            self.wfile.write(response.body)

    def _write_chunks(self, pieces: Iterable[bytes]) -> None:
        for piece in pieces:
            if piece:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")

    def _stopped(self) -> bool:
        """A stream ends when the server stops or its connection is gone (client, "down")."""
        return self.server.owner.stopping.is_set() or _peer_closed(self.connection)

    def _drop(self, rst: bool = False) -> None:
        """End the connection without an answer: a plain close (FIN) or a reset (RST)."""
        self.close_connection = True
        if not rst:
            shutdown(self.connection)
            return
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def _stream_huge(self, fault: FaultRule) -> None:
        """``fault.size`` bytes from one reused buffer: memory stays flat whatever the size."""
        self._server_name = "emulator"
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if fault.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(fault.size))
        self.end_headers()
        pieces = _filler(fault.size, self._stopped)
        if fault.chunked:
            self._write_chunks(pieces)
            return
        for piece in pieces:
            self.wfile.write(piece)

    def _write_short(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "4096")
        self.end_headers()
        self.wfile.write(b'{"action": "term')
        self._drop()


def _filler(size: int, stopped: Callable[[], bool]) -> Iterator[memoryview]:
    remaining = size
    while remaining > 0 and not stopped():
        piece = _FILLER[:min(remaining, len(_FILLER))]
        yield piece
        remaining -= len(piece)


def _handle_safely(app: EmulatorApp, request: Request) -> Response:
    """An emulator bug answers 500 with its traceback on stderr, never a silent hang-up."""
    try:
        return app.handle(request)
    except Exception as exc:  # noqa: BLE001 - reported (stderr + 500), not swallowed
        traceback.print_exc(file=sys.stderr)
        return app.error_response(500, f"emulator error: {type(exc).__name__}: {exc}")


def _fault_response(app: EmulatorApp, fault: FaultRule) -> Response:
    if fault.body is None:
        response = app.error_response(fault.status, "injected fault")
    elif isinstance(fault.body, str):
        response = Response(fault.status, fault.body.encode(), (("Content-Type", "text/plain"),))
    else:
        response = Response(fault.status, json.dumps(fault.body).encode(),
                            (("Content-Type", "application/json"),))
    if fault.retry_after is None:
        return response
    return dataclasses.replace(
        response, headers=(*response.headers, ("Retry-After", str(fault.retry_after))))


def _peer_closed(conn: socket.socket) -> bool:
    """True once the client hung up (or the connection was cut), so an idle stream ends."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


LINGER_S = 2.0
LINGER_BYTES = 1 << 20


def _linger(conn: socket.socket) -> None:
    """A lingering close, as HTTP servers do after refusing a body they did not read (Apache's
    lingering_close, nginx's lingering_close): half-close, then read and discard what the client
    is still sending, for a moment. Closing with unread data makes the kernel answer it with a
    reset, which can break the client's send or destroy the refusal before the client reads it."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(LINGER_S)
        drained = 0
        while drained < LINGER_BYTES:
            data = conn.recv(65536)
            if not data:
                return
            drained += len(data)
    except OSError:
        pass
