"""``KubeApiServer``: the emulator's lifecycle, settings, auth, log and "down" switch.

Two listeners on 127.0.0.1: the API port (the Kubernetes API and ``/_emu/``) and a control
port (``/_emu/`` only) that stays up while the API port is made to refuse connections.
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Self

from . import control
from .api import Api
from .controllers import Controllers
from .faults import Faults, RequestLog
from .http_shell import BACKLOG, Listener, shutdown_quietly
from .options import Options, with_changes
from .store import Store


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
        self._api = Listener(self, control_only=False)
        self._control = Listener(self, control_only=True)

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
                shutdown_quietly(conn)

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
    def seed(self, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Store manifests as given (see ``control.seed``); ValueError on a bad one."""
        return control.seed(self, objects)

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
                shutdown_quietly(conn)
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
