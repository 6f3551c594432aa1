"""The imperative shell every emulator runs in: threaded HTTP, faults, request log.

Two listeners: the service port (what the agent talks to) and a control port that only
answers ``/_emu/`` and stays up whatever the test does to the other. ``/_emu/`` is
answered on the service port too, while it listens. The service goes down two ways:
``refuse`` closes its port (connection refused; ``up`` listens again on the same number),
``reset`` keeps accepting but resets every request unanswered. Either way the open
connections are cut, so running requests and streams end.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
from collections import deque
from http.server import ThreadingHTTPServer
from typing import Any, Self

from tests.emulators._app import BaseApp, EmulatorApp
from tests.emulators._control import BadCommand, Command, choice, field, run_command
from tests.emulators._faults import FaultTable, parse_rule
from tests.emulators._handler import Handler, shutdown
from tests.emulators._http import Request, Response

__all__ = ["BaseApp", "EmulatorApp", "EmulatorServer", "InProcessEmulator", "RequestLog"]

LOG_LIMIT = 100_000
# The stdlib default (5) drops SYNs when 32 clients connect at once.
BACKLOG = 1024
DOWN_MODES = ("refuse", "reset")


class RequestLog:
    """Every service request (control requests excluded), oldest first, bounded.

    Entries are numbered from 1 (``seq``) and the numbers go on across ``clear``, so
    "what came after N" stays meaningful.
    """

    def __init__(self, limit: int = LOG_LIMIT) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=limit)
        self._lock = threading.Lock()
        self._seq = 0

    def append(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._seq += 1
            entry["seq"] = self._seq
            self._entries.append(entry)

    def select(self, path: str = "", since: int = 0) -> list[dict[str, Any]]:
        """Entries after ``since`` whose path starts with ``path``."""
        with self._lock:
            return [entry for entry in self._entries
                    if entry["seq"] > since and entry["path"].startswith(path)]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    @property
    def last_seq(self) -> int:
        with self._lock:
            return self._seq


class EmulatorServer:
    """Serves one app on loopback until ``stop()``; binds in the constructor."""

    def __init__(self, app: EmulatorApp, host: str = "127.0.0.1", port: int = 0,
                 seed: int | None = None) -> None:
        self.app = app
        self.host = host
        self.faults = FaultTable(seed)
        self.log = RequestLog()
        self.stopping = threading.Event()
        self.down_mode: str | None = None
        self._listen_lock = threading.Lock()
        self._up_timer: threading.Timer | None = None
        self._data: Listener | None = Listener((host, port), self, control_only=False)
        self.port: int = self._data.server_address[1]
        try:
            self._control = Listener((host, 0), self, control_only=True)
        except OSError:
            self._data.server_close()
            raise
        self._commands: dict[str, Command] = {**app.commands(), **self._own_commands()}
        self._serving: list[Listener] = []

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def control_port(self) -> int:
        return int(self._control.server_address[1])

    @property
    def control_url(self) -> str:
        return f"http://{self.host}:{self.control_port}"

    @property
    def open_connections(self) -> int:
        """Connections open on the service port now (streams included)."""
        data = self._data
        return data.connection_count() if data is not None else 0

    def start(self) -> EmulatorServer:
        self._serve(self._control)
        if self._data is not None:
            self._serve(self._data)
        self.app.start(self.url)
        return self

    def stop(self) -> None:
        """Stop both listeners, wake every waiting handler, cut open connections."""
        self.stopping.set()
        self.app.close()
        with self._listen_lock:
            self._cancel_up_timer()
            listeners = [self._control] + ([self._data] if self._data else [])
            self._data = None
        # Close the listeners side by side: each waits up to one poll interval.
        closers = [threading.Thread(target=self._close, args=(listener,))
                   for listener in listeners]
        for closer in closers:
            closer.start()
        for closer in closers:
            closer.join()

    def down(self, mode: str = "refuse", seconds: float | None = None) -> None:
        """Take the service down (see the module doc); back up by itself after ``seconds``."""
        if mode not in DOWN_MODES:
            raise BadCommand(f"mode must be one of {DOWN_MODES}")
        with self._listen_lock:
            self._check_running()
            self._cancel_up_timer()
            if mode == "refuse" and self._data is not None:
                listener, self._data = self._data, None
                self._close(listener)
            elif mode == "reset":
                self._listen()
                if self._data is not None:
                    self._data.drop_connections()
            self.down_mode = mode
            if seconds is not None:
                timer = threading.Timer(seconds, lambda: self._timed_up(timer))
                timer.daemon = True
                self._up_timer = timer
                timer.start()

    def up(self) -> None:
        """The service port listens and serves again."""
        with self._listen_lock:
            self._check_running()
            self._cancel_up_timer()
            self._listen()
            self.down_mode = None

    def control(self, request: Request) -> Response:
        return run_command(self._commands, request)

    def _own_commands(self) -> dict[str, Command]:
        def reset(_: dict[str, Any]) -> None:
            self.up()
            self.app.reset()
            self.faults.clear()
            self.log.clear()

        def remove_fault(body: dict[str, Any]) -> None:
            rule_id = field(body, "id", int)
            if not self.faults.remove(rule_id):
                raise BadCommand(f"no fault rule {rule_id}")

        def down(body: dict[str, Any]) -> dict[str, Any]:
            seconds = field(body, "seconds", (int, float), None)
            self.down(choice(body, "mode", DOWN_MODES, "refuse"),
                      None if seconds is None else float(seconds))
            return {"down": self.down_mode}

        return {
            "ping": lambda _: {"pid": os.getpid(), "now": self.app.now(), "port": self.port,
                               "control_port": self.control_port, "down": self.down_mode},
            "reset": reset,
            "fault": lambda body: self.faults.add(parse_rule(body)),
            "faults": lambda _: self.faults.rules(),
            "faults/remove": remove_fault,
            "faults/clear": lambda _: self.faults.clear(),
            "requests": lambda body: self.log.select(field(body, "path", str, ""),
                                                     field(body, "since", int, 0)),
            "requests/last": lambda _: self.log.last_seq,
            "requests/clear": lambda _: self.log.clear(),
            "down": down,
            "up": lambda _: self.up(),
        }

    def _check_running(self) -> None:
        if self.stopping.is_set():
            raise BadCommand("emulator is stopping")

    def _listen(self) -> None:
        """Open the service port again if it was closed (under ``_listen_lock``)."""
        if self._data is not None:
            return
        try:
            self._data = Listener((self.host, self.port), self, control_only=False)
        except OSError as exc:
            raise BadCommand(f"cannot listen on port {self.port} again: {exc}") from None
        self._serve(self._data)

    def _timed_up(self, timer: threading.Timer) -> None:
        with self._listen_lock:
            if self._up_timer is not timer or self.stopping.is_set():
                return  # cancelled, or replaced by a later down()
            self._up_timer = None
            try:
                self._listen()
            except BadCommand as exc:
                print(f"emulator: timed up failed: {exc}", file=sys.stderr)
                return
            self.down_mode = None

    def _cancel_up_timer(self) -> None:
        if self._up_timer is not None:
            self._up_timer.cancel()
            self._up_timer = None

    def _serve(self, listener: Listener) -> None:
        thread = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.02},
                                  name=f"emulator:{listener.server_address[1]}", daemon=True)
        thread.start()
        self._serving.append(listener)

    def _close(self, listener: Listener) -> None:
        if listener in self._serving:
            listener.shutdown()  # only a started loop can be waited for
            self._serving.remove(listener)  # list.remove: atomic under the GIL
        listener.server_close()
        listener.drop_connections()


class InProcessEmulator:
    """``with Emulator(...) as emu:``: an emulator this process serves with ``self.server``."""

    server: EmulatorServer

    def start(self) -> Self:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Listener(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a hung handler must not hold up stop()
    request_queue_size = BACKLOG

    def __init__(self, address: tuple[str, int], owner: EmulatorServer, control_only: bool) -> None:
        self.owner = owner
        self.control_only = control_only
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, Handler)

    def track(self, conn: socket.socket, present: bool) -> None:
        with self._connections_lock:
            if present:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def connection_count(self) -> int:
        with self._connections_lock:
            return len(self._connections)

    def drop_connections(self) -> None:
        """A stopped service resets its clients too, not only its listening socket."""
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            shutdown(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # clients, faults and "down" drop connections: not worth a traceback
        super().handle_error(request, client_address)
