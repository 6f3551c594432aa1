"""What an emulator provides to the shared shell, and the defaults most of them keep.

The shell (``_server`` + ``_handler``) owns sockets, faults, the request log and the
``/_emu/`` control API; an app owns the emulated service's behaviour. The hooks below
let an app shape what is its peer's own: how it refuses (its error body), who the caller
is (authentication), what of a request the log keeps, and the background work the
emulated service does by itself.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from tests.emulators._control import Command
from tests.emulators._http import Request, Response, text_response


class EmulatorApp(Protocol):
    """What an emulator provides; the server does the rest."""

    logged_headers: tuple[str, ...]
    # Read ``Transfer-Encoding: chunked`` request bodies (else they are refused with 411).
    chunked_requests: bool

    def handle(self, request: Request) -> Response: ...

    def commands(self) -> Mapping[str, Command]: ...

    def reset(self) -> None: ...

    def now(self) -> float: ...

    def start(self, url: str) -> None: ...

    def close(self) -> None: ...

    def authenticate(self, request: Request) -> tuple[str | None, bool]: ...

    def log_fields(self, request: Request) -> Mapping[str, Any]: ...

    def error_response(self, status: int, message: str) -> Response: ...


class BaseApp:
    """Defaults: no authentication, nothing logged beyond the shell's fields, plain-text errors."""

    logged_headers: tuple[str, ...] = ()
    chunked_requests = False

    def commands(self) -> Mapping[str, Command]:
        return {}

    def reset(self) -> None:
        """Nothing to forget."""

    def now(self) -> float:
        return time.time()

    def start(self, url: str) -> None:
        """Begin the service's own background work; ``url`` is where it is served."""

    def close(self) -> None:
        """Nothing waits on the app itself; hung handlers wake on the server's stop event."""

    def authenticate(self, request: Request) -> tuple[str | None, bool]:
        """(user for the log, accepted); a refused request is answered 401 unserved."""
        return None, True

    def log_fields(self, request: Request) -> Mapping[str, Any]:
        """Fields the request log keeps besides method, path, query, headers and outcome."""
        return {}

    def error_response(self, status: int, message: str) -> Response:
        """How this service answers an error the shell produces (a fault, a refusal, a bug)."""
        return text_response(status, f"{status} {message}\n")
