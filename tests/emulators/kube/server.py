"""``KubeApiServer``: the Kubernetes emulator served in this process by the shared shell.

Two listeners on 127.0.0.1: the API port (the Kubernetes API and ``/_emu/``) and a control
port (``/_emu/`` only) that stays up while the API port is down.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tests.emulators._server import EmulatorServer, InProcessEmulator

from .app import KubeApp
from .client import KubeControl
from .controllers import Controllers
from .options import Options


class KubeApiServer(KubeControl, InProcessEmulator):
    """``with KubeApiServer(options=...) as kube:``; ``start()`` serves, ``stop()`` ends it all.

    ``run_controllers=False`` leaves the simulated kubelet and controllers to the caller
    (``controllers.run_once()``), for tests that must step the cluster deterministically.
    The cluster itself (store, settings, API) is ``app``.
    """

    def __init__(self, port: int = 0, options: Options | None = None,
                 clock: Callable[[], float] = time.time, run_controllers: bool = True,
                 fault_seed: int | None = None) -> None:
        self.app = KubeApp(options, clock, run_controllers)
        self.server = EmulatorServer(self.app, "127.0.0.1", port, fault_seed)
        super().__init__(self.server.control_url)
        self.url = self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def control_port(self) -> int:
        return self.server.control_port

    @property
    def controllers(self) -> Controllers:
        return self.app.controllers

    @property
    def stopping(self) -> threading.Event:
        return self.server.stopping

    @property
    def open_connections(self) -> int:
        """API connections open now (watches included)."""
        return self.server.open_connections
