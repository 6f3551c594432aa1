"""GCP Compute Engine metadata server, as Google documents it.

- Base ``/computeMetadata/v1/``; every request needs ``Metadata-Flavor: Google``
  (without it, or with an ``X-Forwarded-For`` header: 403, as the real server
  does), and every answer carries ``Metadata-Flavor: Google`` back.
- Values are text (``Content-Type: application/text``) with an ``ETag`` that is
  a hash of the value, so the same value always has the same ETag.
- ``?wait_for_change=true&last_etag=E`` answers as soon as the value's ETag
  differs from E - at once if E is already stale - or at ``timeout_sec`` with
  the unchanged value. Without ``last_etag`` it waits for the next change.

``answer`` is pure: it returns a ``Response`` or a ``Wait`` that the app's shell
blocks on (``changed`` says when to stop waiting).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from tests.emulators._control import choice
from tests.emulators._control import field as get
from tests.emulators._http import Request, Response

PREFIX = "/computeMetadata/v1/"
MAINTENANCE_EVENTS = ("NONE", "MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE")
SERVER = "Metadata Server for VM"
FLAVOR = ("Metadata-Flavor", "Google")
CONFIG_KEYS = ("instance_id", "name", "zone")


@dataclass
class GcpState:
    instance_id: str = "4520031799277581759"
    name: str = "gce-emu-0"
    zone: str = "projects/123456789012/zones/us-central1-a"
    preempted: bool = False
    maintenance_event: str = "NONE"


@dataclass(frozen=True, slots=True)
class Wait:
    """Block until ``key``'s ETag differs from ``etag`` or ``timeout_s`` passes."""

    key: str
    etag: str
    timeout_s: float | None


def value(state: GcpState, key: str) -> str | None:
    return {
        "instance/id": state.instance_id,
        "instance/name": state.name,
        "instance/zone": state.zone,
        "instance/preempted": "TRUE" if state.preempted else "FALSE",
        "instance/maintenance-event": state.maintenance_event,
    }.get(key)


def etag(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def answer(state: GcpState, request: Request) -> Response | Wait:
    if request.header("x-forwarded-for") is not None:
        return _error(403, "Forbidden: requests with X-Forwarded-For are refused.")
    if request.header("metadata-flavor") != "Google":
        return _error(403, "Missing Metadata-Flavor:Google header.")
    if request.method != "GET":
        return _error(405, "Method Not Allowed")
    key = request.path[len(PREFIX):] if request.path.startswith(PREFIX) else ""
    text = value(state, key)
    if text is None:
        return _error(404, "Not Found")
    if request.query.get("wait_for_change", "").lower() != "true":
        return render(state, key)
    raw_timeout = request.query.get("timeout_sec")
    if raw_timeout is not None and not raw_timeout.isdigit():
        return _error(400, "timeout_sec must be a non-negative integer")
    last = request.query.get("last_etag") or etag(text)
    wait = Wait(key, last, float(raw_timeout) if raw_timeout is not None else None)
    return render(state, key) if changed(state, wait) else wait


def changed(state: GcpState, wait: Wait) -> bool:
    current = value(state, wait.key)
    return current is None or etag(current) != wait.etag


def render(state: GcpState, key: str) -> Response:
    text = value(state, key)
    if text is None:
        return _error(404, "Not Found")
    headers = (("Content-Type", "application/text"), ("ETag", etag(text)), FLAVOR)
    return Response(200, text.encode(), headers, SERVER)


def _error(status: int, message: str) -> Response:
    body = f"<!DOCTYPE html>\n<html><body><p>{status}. {message}</p></body></html>\n"
    return Response(status, body.encode(), (("Content-Type", "text/html"), FLAVOR), SERVER)


def cmd_set(state: GcpState, body: dict[str, Any], now: float) -> Any:
    """Set ``preempted`` (bool) and/or ``maintenance_event``; long-polls wake on change."""
    state.preempted = get(body, "preempted", bool, state.preempted)
    state.maintenance_event = choice(body, "maintenance_event", MAINTENANCE_EVENTS,
                                     state.maintenance_event)
    return {"preempted": value(state, "instance/preempted"),
            "maintenance_event": state.maintenance_event}


COMMANDS = {"gcp": cmd_set}
