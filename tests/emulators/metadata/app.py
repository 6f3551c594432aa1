"""One metadata service for a scenario: routes requests to the enabled providers.

The provider modules hold the behaviour as functions of (state, request, now);
this module owns the shared state, its lock, the emulator clock and the GCP
long-poll wait. A control command changes state under the lock and wakes every
long-poll, so a waiting client sees the change at once.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.emulators._app import BaseApp
from tests.emulators._control import BadCommand, Command
from tests.emulators._control import field as get
from tests.emulators._http import Request, Response, text_response
from tests.emulators._server import EmulatorServer, InProcessEmulator
from tests.emulators.metadata import aws, azure, gcp, sco
from tests.emulators.metadata.client import MetadataControl

PROVIDERS = ("aws", "gcp", "azure", "sco")
# Without timeout_sec the real server may wait a very long time; a test never should.
LONG_POLL_CAP_S = 300.0

Handler = Callable[[Any, Request, float], Response]


@dataclass(frozen=True)
class _Provider:
    prefix: str
    state: type
    config_keys: tuple[str, ...]
    handle: Handler | None  # None: served by the app itself (GCP long-poll)
    commands: Mapping[str, Callable[[Any, dict[str, Any], float], Any]]


_TABLE = {
    "aws": _Provider("/latest/", aws.AwsState, aws.CONFIG_KEYS, aws.handle, aws.COMMANDS),
    "gcp": _Provider("/computeMetadata/", gcp.GcpState, gcp.CONFIG_KEYS, None, gcp.COMMANDS),
    "azure": _Provider("/metadata/", azure.AzureState, azure.CONFIG_KEYS, azure.handle,
                       azure.COMMANDS),
    "sco": _Provider("/sco/", sco.ScoState, sco.CONFIG_KEYS, sco.handle, sco.COMMANDS),
}


def route(path: str) -> str | None:
    """The provider whose URL space ``path`` is in."""
    for name, provider in _TABLE.items():
        if path.startswith(provider.prefix):
            return name
    return None


def build_states(providers: Iterable[str], scenario: Mapping[str, Any]) -> dict[str, Any]:
    """Fresh provider states from a scenario (identity and flags per provider)."""
    names = tuple(providers)
    if not names or set(names) - set(PROVIDERS):
        raise ValueError(f"providers must be a non-empty subset of {PROVIDERS}, got {names}")
    if set(scenario) - set(PROVIDERS):
        raise ValueError(f"scenario: unknown sections {sorted(set(scenario) - set(PROVIDERS))}")
    states = {}
    for name in names:
        provider = _TABLE[name]
        config = scenario.get(name) or {}
        if not isinstance(config, Mapping) or set(config) - set(provider.config_keys):
            raise ValueError(f"scenario.{name}: allowed keys are {provider.config_keys}")
        defaults = provider.state()
        for key, value in config.items():
            default = getattr(defaults, key)
            if default is not None and type(value) is not type(default):
                raise ValueError(f"scenario.{name}.{key} must be {type(default).__name__}")
        states[name] = provider.state(**config)
    return states


class MetadataApp(BaseApp):
    """The metadata service of one scenario (which providers, whose identity)."""

    logged_headers = ("x-aws-ec2-metadata-token", "x-aws-ec2-metadata-token-ttl-seconds",
                      "metadata-flavor", "metadata", "x-forwarded-for", "user-agent",
                      "content-type", "content-length")

    def __init__(self, providers: Iterable[str] = PROVIDERS,
                 scenario: Mapping[str, Any] | None = None) -> None:
        self.providers = tuple(providers)
        self._scenario = dict(scenario or {})
        self.states = build_states(self.providers, self._scenario)
        self._cond = threading.Condition()
        self._offset = 0.0
        self._closed = False
        self._waiters = 0  # parked GCP long-polls; tests sync on it instead of sleeping

    def now(self) -> float:
        """The emulator clock: wall time plus whatever the tests fast-forwarded."""
        return time.time() + self._offset

    def handle(self, request: Request) -> Response:
        name = route(request.path)
        if name is None or name not in self.states:
            return text_response(404, "no metadata service at this path in this scenario\n")
        handler = _TABLE[name].handle
        with self._cond:
            if handler is None:
                return self._gcp(request)
            return handler(self.states[name], request, self.now())

    def _gcp(self, request: Request) -> Response:
        out = gcp.answer(self.states["gcp"], request)
        if isinstance(out, Response):
            return out
        limit = out.timeout_s if out.timeout_s is not None else LONG_POLL_CAP_S
        deadline = time.monotonic() + limit
        self._waiters += 1
        try:
            # Re-read the state each round: a reset replaces it while we wait.
            while not self._closed and not gcp.changed(self.states["gcp"], out):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        finally:
            self._waiters -= 1
        return gcp.render(self.states["gcp"], out.key)

    def commands(self) -> dict[str, Command]:
        table: dict[str, Command] = {"clock": self._clock, "state": self._state}
        for name, provider in _TABLE.items():
            for command, fn in provider.commands.items():
                table[command] = self._bind(name, fn)
        return table

    def reset(self) -> None:
        with self._cond:
            self.states = build_states(self.providers, self._scenario)
            self._offset = 0.0
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _bind(self, provider: str, fn: Callable[[Any, dict[str, Any], float], Any]) -> Command:
        def run(body: dict[str, Any]) -> Any:
            with self._cond:
                if provider not in self.states:
                    raise BadCommand(f"provider {provider!r} is not in this scenario")
                result = fn(self.states[provider], body, self.now())
                self._cond.notify_all()
                return result
        return run

    def _clock(self, body: dict[str, Any]) -> Any:
        """``advance`` (seconds) or ``set`` (epoch) the emulator clock; returns ``now``."""
        with self._cond:
            if "set" in body:
                self._offset = float(get(body, "set", (int, float))) - time.time()
            self._offset += float(get(body, "advance", (int, float), 0))
            self._cond.notify_all()
            return {"now": self.now()}

    def _state(self, body: dict[str, Any]) -> Any:
        with self._cond:
            snapshot = {name: dataclasses.asdict(state) for name, state in self.states.items()}
            waiters = self._waiters
        if "aws" in snapshot:
            snapshot["aws"]["tokens"] = len(snapshot["aws"]["tokens"])
        return {"now": self.now(), "providers": list(self.providers), "states": snapshot,
                "gcp_waiters": waiters}


class MetadataEmulator(MetadataControl, InProcessEmulator):
    """In-process emulator: ``with MetadataEmulator(("aws",)) as emu: ... emu.url ...``."""

    def __init__(self, providers: Iterable[str] = PROVIDERS,
                 scenario: Mapping[str, Any] | None = None, host: str = "127.0.0.1",
                 port: int = 0, seed: int | None = None) -> None:
        self.app = MetadataApp(providers, scenario)
        self.server = EmulatorServer(self.app, host, port, seed)
        super().__init__(self.server.control_url)
        self.url = self.server.url
