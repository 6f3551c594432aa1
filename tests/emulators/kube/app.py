"""The Kubernetes API server as an app of the shared emulator shell (``tests.emulators._server``).

What is the API server's own lives here: its Status error bodies, bearer-token
authentication, watch streams (chunked JSON lines), the headers it answers with, and the
control commands of a cluster (``seed``, ``options``, ``tick``). The shell adds faults,
down/up, the request log, ``reset`` and ``ping``.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tests.emulators._app import BaseApp
from tests.emulators._control import BadCommand, Command, field
from tests.emulators._http import Request, Response

from . import protobuf
from .apf import SeatLimit
from .api import Api, Reply
from .client import APF_REJECTION_BODY
from .controllers import Controllers
from .errors import ApiError, status_body
from .options import Options, as_json, with_changes
from .resources import BY_KIND
from .store import Store
from .watch import WatchRequest, watch_events

SERVER = "kube-emulator"
APF_QUEUE_WAIT_S = 15.0   # 1.20: a request queued longer than this is rejected (requestWaitLimit)
_LOGGED_BODY_LIMIT = 8192
_CACHE_CONTROL = ("Cache-Control", "no-cache, private")  # on every answer of the real server


class KubeApp(BaseApp):
    """One emulated cluster: the store, the simulated controllers and the REST API over them.

    ``run_controllers=False`` leaves the simulated kubelet and controllers to the caller
    (``controllers.run_once()``), for tests that must step the cluster deterministically.
    """

    logged_headers = ("content-type", "accept", "user-agent")
    chunked_requests = True  # client-go may stream a body of unknown length

    def __init__(self, options: Options | None = None, clock: Callable[[], float] = time.time,
                 run_controllers: bool = True) -> None:
        self.clock = clock
        self.initial_options = options or Options()
        self.options = self.initial_options
        self.store = Store(clock, history=self.options.history)
        self.controllers = Controllers(self.store, lambda: self.options, clock)
        self._address = "127.0.0.1:0"
        self.api = Api(self.store, lambda: self.options, lambda: self._address, clock)
        self._run_controllers = run_controllers
        self.apf = SeatLimit()

    # -- the shell's hooks -------------------------------------------------------------

    def now(self) -> float:
        return self.clock()

    def start(self, url: str) -> None:
        self._address = url.partition("://")[2]
        if self._run_controllers:
            self.controllers.start()

    def close(self) -> None:
        self.store.close()
        self.controllers.stop()

    def reset(self) -> None:
        """A fresh cluster with the settings it started with."""
        self.options = self.initial_options
        self.store.reset()

    def handle(self, request: Request) -> Response:
        opts = self.options
        if opts.apf_seats and request.query.get("watch") not in ("1", "true") \
                and request.path.startswith(("/api/", "/apis/")):
            if not self.apf.enter(opts.apf_seats, opts.apf_queue, APF_QUEUE_WAIT_S):
                return _encode(Reply(429, APF_REJECTION_BODY, {"Retry-After": "1"}))
            held_since = time.monotonic()
            try:
                return self._handle(request)
            finally:
                self.apf.leave(held_since, opts.apf_service_s)
        return self._handle(request)

    def _handle(self, request: Request) -> Response:
        result = self.api.handle(request, self.authenticate(request)[0])
        if isinstance(result, WatchRequest):
            watch = result
            return Response(200, headers=(("Content-Type", "application/json"), _CACHE_CONTROL),
                            server=SERVER, stream=lambda stopped: self._events(watch, stopped))
        return _encode(result)

    def authenticate(self, request: Request) -> tuple[str | None, bool]:
        """With no token map every request is accepted anonymously."""
        tokens = self.options.tokens
        if not tokens:
            return None, True
        auth = request.headers.get("authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if token is not None and token in tokens:
            return tokens[token], True
        return None, False

    def log_fields(self, request: Request) -> Mapping[str, Any]:
        if request.method in ("GET", "HEAD") or not request.body:
            return {}
        return {"body": _loggable(request.body, request.headers.get("content-type", ""))}

    def error_response(self, status: int, message: str) -> Response:
        return _encode(Reply(status, status_body(status, message)))

    def commands(self) -> dict[str, Command]:
        return {"seed": lambda body: self.seed(field(body, "objects", list)),
                "options": self._options_command, "tick": self._tick}

    # -- the cluster -------------------------------------------------------------------

    def seed(self, objects: list[Any]) -> list[dict[str, Any]]:
        """Create ``objects`` as stored state (status kept, namespaces auto-created), then
        run the controllers once, so PDB status and pod phases are settled on return.
        ``BadCommand`` names the index of a bad object."""
        created = []
        for i, obj in enumerate(objects):
            rt = BY_KIND.get(obj.get("kind", "")) if isinstance(obj, dict) else None
            if rt is None:
                raise BadCommand(f"objects[{i}]: kind must be one of {sorted(BY_KIND)}")
            ns = (obj.get("metadata") or {}).get("namespace") or "default"
            try:
                stored = self.store.create(rt, ns if rt.namespaced else "", obj, seeding=True)
            except ApiError as err:
                raise BadCommand(f"objects[{i}]: {err.status['message']}") from None
            meta = stored["metadata"]
            created.append({"kind": rt.kind, "namespace": meta.get("namespace", ""),
                            "name": meta["name"], "uid": meta["uid"]})
        self.controllers.run_once()
        return created

    def _options_command(self, changes: dict[str, Any]) -> dict[str, Any]:
        """The settings; a non-empty body changes the runtime ones first."""
        if changes:
            self.options = with_changes(self.options, changes)
        return as_json(self.options)

    def _tick(self, _: dict[str, Any]) -> dict[str, Any]:
        """Run the simulated kubelet and controllers once, now."""
        self.controllers.run_once()
        return {"resourceVersion": self.store.resource_version}

    def _events(self, watch: WatchRequest, stopped: Callable[[], bool]) -> Iterator[bytes]:
        def lag() -> float:
            return float(self.options.watch_lag.get(watch.rt.name, 0.0))

        for event in watch_events(self.store, watch, self.clock, stopped, lag):
            yield json.dumps(event, separators=(",", ":")).encode() + b"\n"


def _encode(reply: Reply) -> Response:
    if isinstance(reply.body, (dict, list)):
        data, ctype = json.dumps(reply.body, separators=(",", ":")).encode(), "application/json"
    else:
        data, ctype = str(reply.body).encode(), "text/plain; charset=utf-8"
    headers = (("Content-Type", ctype), _CACHE_CONTROL, *reply.headers.items())
    return Response(reply.code, data, headers, SERVER)


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
