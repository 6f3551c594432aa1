"""The ``/_emu/`` control API shared by the emulators: one dispatch path and its client.

A command is a function from a JSON object (the request body) to a JSON value.
Dispatch is parse -> look up -> execute, with one envelope for every answer:
``{"ok": true, "result": ...}`` (200) or ``{"ok": false, "error": "..."}``
(400 for a bad command body, 404 for an unknown command). Commands are sent as
``POST /_emu/<name>`` with a JSON body; the read-only ones answer a GET too.
"""
from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

from common.timefmt import parse_rfc3339
from tests.emulators._http import CONTROL_PREFIX, Request, Response, json_response
from tests.procutil import wait_for

Command = Callable[[dict[str, Any]], Any]
T = TypeVar("T")
_REQUIRED = object()


class BadCommand(ValueError):
    """A control request whose body does not fit the command; answered with 400."""


def run_command(commands: Mapping[str, Command], request: Request) -> Response:
    """Execute one control request and wrap the outcome in the envelope."""
    name = request.path[len(CONTROL_PREFIX):].strip("/")
    command = commands.get(name)
    if command is None:
        return json_response(404, {"ok": False, "error": f"unknown command {name!r}",
                                   "commands": sorted(commands)})
    try:
        body = json.loads(request.body) if request.body.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        return json_response(400, {"ok": False, "error": f"body is not JSON: {exc}"})
    if not isinstance(body, dict):
        return json_response(400, {"ok": False, "error": "body must be a JSON object"})
    try:
        result = command(body)
    except (BadCommand, ValueError) as exc:
        return json_response(400, {"ok": False, "error": str(exc)})
    # Any other exception is an emulator bug: tell the test rather than hang up.
    except Exception as exc:  # noqa: BLE001 - reported in the reply, not swallowed
        return json_response(500, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    return json_response(200, {"ok": True, "result": result})


def field(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...],
          default: Any = _REQUIRED) -> Any:
    """``body[name]`` checked against ``kind`` (bool is never a number here)."""
    if name not in body or body[name] is None:
        if default is _REQUIRED:
            raise BadCommand(f"missing field {name!r}")
        return default
    value = body[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    is_bool = isinstance(value, bool)
    if not isinstance(value, kinds) or (is_bool and bool not in kinds):
        names = "/".join(k.__name__ for k in kinds)
        raise BadCommand(f"field {name!r} must be {names}, got {type(value).__name__}")
    return value


def choice(body: Mapping[str, Any], name: str, allowed: tuple[str, ...],
           default: Any = _REQUIRED) -> Any:
    """A string field restricted to ``allowed``."""
    value = field(body, name, str, default)
    if value is not default and value not in allowed:
        raise BadCommand(f"field {name!r} must be one of {allowed}, got {value!r}")
    return value


def moment(body: Mapping[str, Any], now: float, default_in_s: float) -> float:
    """The time a command refers to: ``at`` (RFC 3339 or epoch) or ``in_s`` from ``now``."""
    at = body.get("at")
    if at is not None:
        if isinstance(at, str):
            try:
                return parse_rfc3339(at)
            except ValueError as exc:
                raise BadCommand(f"field 'at': {exc}") from None
        return float(field(body, "at", (int, float)))
    return now + float(field(body, "in_s", (int, float), default_in_s))


class ControlError(RuntimeError):
    """The emulator refused a control command (the message is its error text)."""


class ControlClient:
    """Talks to one emulator's control listener; the emulator-specific helpers build on it."""

    def __init__(self, control_url: str, timeout: float = 10.0) -> None:
        parts = urlsplit(control_url)
        self.control_url = control_url
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self._timeout = timeout

    def call(self, command: str, body: Mapping[str, Any] | None = None) -> Any:
        """POST ``/_emu/<command>``; the result, or ``ControlError``."""
        payload = json.dumps({k: v for k, v in (body or {}).items() if v is not None})
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        try:
            conn.request("POST", CONTROL_PREFIX + command, body=payload,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        reply = json.loads(raw)
        if not reply.get("ok"):
            raise ControlError(f"{command}: {reply.get('error')}")
        return reply["result"]

    # -- commands every emulator has ------------------------------------------------

    def fault(self, mode: str, **options: Any) -> int:
        """Add a fault rule (see ``tests.emulators._faults``); returns its id."""
        return self.call("fault", {"mode": mode, **options})

    def faults(self) -> list[dict[str, Any]]:
        return self.call("faults")

    def remove_fault(self, rule_id: int) -> None:
        self.call("faults/remove", {"id": rule_id})

    def clear_faults(self) -> None:
        self.call("faults/clear")

    def requests(self, path: str = "", since: int = 0) -> list[dict[str, Any]]:
        """The request log (oldest first): entries after ``since`` whose path starts with ``path``.

        An entry has ``seq``, ``time``, ``duration``, ``method``, ``path``, ``query``, the
        emulator's logged ``headers``, ``user``, ``status`` (``None``: no answer) and
        ``fault`` (the mode that fired), plus what the emulator adds (Kubernetes: ``body``).
        """
        return self.call("requests", {"path": path, "since": since})

    def last_request_seq(self) -> int:
        """The ``seq`` of the newest logged request (0: none yet); for ``requests(since=)``."""
        return self.call("requests/last")

    def clear_requests(self) -> None:
        self.call("requests/clear")

    def down(self, mode: str = "refuse", seconds: float | None = None) -> None:
        """``refuse``: clients get 'connection refused'; ``reset``: connections are reset
        unanswered. Open connections are cut; ``seconds``: back up by itself after that."""
        self.call("down", {"mode": mode, "seconds": seconds})

    def up(self) -> None:
        self.call("up")

    def wait_until(self, probe: Callable[[], T | None], timeout: float = 5.0,
                   interval: float = 0.02) -> T:
        """Poll ``probe`` until it returns something truthy; ``TimeoutError`` at the deadline."""
        return wait_for(probe, timeout, f"the emulator at {self.control_url}", interval, retry_on=())
