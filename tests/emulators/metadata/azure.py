"""Azure Instance Metadata Service: Scheduled Events, as Microsoft documents them.

- ``GET /metadata/scheduledevents?api-version=2020-07-01`` with ``Metadata: true``
  (missing header or api-version -> 400 with an ``{"error": ...}`` body) returns
  ``{"DocumentIncarnation": n, "Events": [...]}``. Every change to the event
  list (added, started, removed) increments DocumentIncarnation.
- ``NotBefore`` is RFC 1123 (``Mon, 19 Sep 2016 18:29:47 GMT``) while an event
  is Scheduled and empty once it has Started. There is no Completed status:
  a finished or cancelled event disappears (``remove``).
- ``POST`` the same URL with ``{"StartRequests": [{"EventId": ...}]}`` -> 200 and
  each named Scheduled event goes Started; a malformed body -> 400. Every
  acknowledgement is recorded for tests (an unknown EventId is recorded too,
  and answered 200: the event may just have ended).
- An event's status is the event's, not one VM's: "Acknowledging an event allows
  the event to proceed for all Resources in the event, not just the VM that
  acknowledges the event" (Microsoft's Scheduled Events page). So one VM's
  acknowledgement starts the event for every VM it names; each ack records
  those VMs (``released``: VM name -> the event ids it released them for), and
  ``azure/released`` lists every VM released so far and by which ack.
- ``/metadata/instance/compute/name?api-version=...&format=text`` is the VM name.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

from tests.emulators._control import BadCommand, choice, moment
from tests.emulators._control import field as get
from tests.emulators._http import Request, Response, json_response, text_response

EVENTS_PATH = "/metadata/scheduledevents"
COMPUTE_PREFIX = "/metadata/instance/compute/"
EVENTS_API_VERSIONS = ("2017-11-01", "2019-01-01", "2019-08-01", "2020-07-01")
# Minimum notice per type, from the documentation (Terminate is 5-15 min, configurable).
EVENT_TYPES = {"Reboot": 900.0, "Redeploy": 600.0, "Freeze": 900.0, "Preempt": 30.0,
               "Terminate": 300.0}
STATUSES = ("Scheduled", "Started")
SOURCES = ("Platform", "User")
CONFIG_KEYS = ("vm_name", "vm_id", "location")
_API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass
class AzureState:
    vm_name: str = "vm-emu-0"
    vm_id: str = "02aab8a4-74ef-476e-8182-f6d2ba4166a6"
    location: str = "westeurope"
    incarnation: int = 1
    events: list[dict[str, Any]] = field(default_factory=list)  # NotBefore kept as epoch
    acks: list[dict[str, Any]] = field(default_factory=list)
    rejected_acks: int = 0
    released: dict[str, list[str]] = field(default_factory=dict)   # VM name -> event ids started for it


def handle(state: AzureState, request: Request, now: float) -> Response:
    if request.header("metadata") != "true":
        return _error(400, "Bad request. Required metadata header not specified")
    version = request.query.get("api-version")
    if not version:
        return _error(400, "Bad request. api-version was not specified in the request. "
                           "For more information refer to aka.ms/azureimds")
    if request.path == EVENTS_PATH:
        if version not in EVENTS_API_VERSIONS:
            return json_response(400, {"error": "Bad request. api-version is invalid or was "
                                                "not specified in the request.",
                                       "newest-versions": list(EVENTS_API_VERSIONS[::-1])})
        if request.method == "GET":
            return json_response(200, document(state))
        if request.method == "POST":
            return _start_requests(state, request.body, now)
        return _error(405, "Method not allowed")
    if request.path.startswith(COMPUTE_PREFIX) and _API_VERSION.match(version):
        return _compute(state, request)
    return _error(404, "Resource not found")


def document(state: AzureState) -> dict[str, Any]:
    events = [{**event, "NotBefore": formatdate(event["NotBefore"], usegmt=True)
               if event["EventStatus"] == "Scheduled" else ""} for event in state.events]
    return {"DocumentIncarnation": state.incarnation, "Events": events}


def _start_requests(state: AzureState, body: bytes, now: float) -> Response:
    ids = _parse_start_requests(body)
    if ids is None:
        state.rejected_acks += 1
        return _error(400, "Bad request. Could not parse StartRequests")
    known = {event["EventId"]: event for event in state.events}
    started = [i for i in ids if i in known and known[i]["EventStatus"] == "Scheduled"]
    released: dict[str, list[str]] = {}
    for event_id in started:
        known[event_id]["EventStatus"] = "Started"
        for vm in known[event_id]["Resources"]:   # every VM the event names, not only the caller
            released.setdefault(vm, []).append(event_id)
            state.released.setdefault(vm, []).append(event_id)
    if started:
        state.incarnation += 1
    state.acks.append({"t": now, "event_ids": ids, "started": started, "released": released,
                       "unknown": [i for i in ids if i not in known]})
    return Response(200, b"", (("Content-Type", "application/json"),))


def _parse_start_requests(body: bytes) -> list[str] | None:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    requests = doc.get("StartRequests") if isinstance(doc, dict) else None
    if not isinstance(requests, list) or not requests:
        return None
    ids = [r.get("EventId") for r in requests if isinstance(r, dict)]
    if len(ids) != len(requests) or not all(isinstance(i, str) and i for i in ids):
        return None
    return ids


def _compute(state: AzureState, request: Request) -> Response:
    values = {"name": state.vm_name, "vmId": state.vm_id, "location": state.location}
    leaf = request.path[len(COMPUTE_PREFIX):]
    if leaf not in values:
        return _error(404, "Resource not found")
    fmt = request.query.get("format", "json")
    if fmt == "text":
        return text_response(200, values[leaf])
    if fmt == "json":
        return json_response(200, values[leaf])
    return _error(400, "Bad request. Query parameter format is invalid")


def _error(status: int, message: str) -> Response:
    return json_response(status, {"error": message})


# -- control commands -----------------------------------------------------------------

def cmd_event(state: AzureState, body: dict[str, Any], now: float) -> Any:
    """``op``: add (event_type, in_s/at, resources, ...) | status | remove | clear."""
    op = choice(body, "op", ("add", "status", "remove", "clear"))
    if op == "clear":
        if state.events:
            state.events.clear()
            state.incarnation += 1
        return {"incarnation": state.incarnation}
    if op == "add":
        event = _new_event(state, body, now)
        state.events.append(event)
        state.incarnation += 1
        return {"event_id": event["EventId"], "incarnation": state.incarnation}
    event = _find(state, get(body, "event_id", str))
    if op == "remove":  # finished or cancelled: Azure just drops it from the document
        state.events.remove(event)
        state.incarnation += 1
    else:
        status = choice(body, "status", STATUSES)
        if event["EventStatus"] != status:
            event["EventStatus"] = status
            state.incarnation += 1
    return {"event_id": event["EventId"], "incarnation": state.incarnation}


def _new_event(state: AzureState, body: dict[str, Any], now: float) -> dict[str, Any]:
    event_type = choice(body, "event_type", tuple(EVENT_TYPES), "Preempt")
    resources = get(body, "resources", list, [state.vm_name])
    if not all(isinstance(r, str) for r in resources):
        raise BadCommand("resources must be a list of VM names")
    event_id = get(body, "event_id", str, str(uuid.uuid4()).upper())
    if any(e["EventId"] == event_id for e in state.events):
        raise BadCommand(f"event {event_id!r} exists already")
    return {
        "EventId": event_id,
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": resources,
        "EventStatus": choice(body, "status", STATUSES, "Scheduled"),
        "NotBefore": moment(body, now, EVENT_TYPES[event_type]),
        "Description": get(body, "description", str, f"{event_type} event scheduled"),
        "EventSource": choice(body, "source", SOURCES, "Platform"),
        "DurationInSeconds": get(body, "duration_s", int, -1),
    }


def cmd_acks(state: AzureState, body: dict[str, Any], now: float) -> Any:
    return {"acks": list(state.acks), "rejected": state.rejected_acks}


def cmd_released(state: AzureState, body: dict[str, Any], now: float) -> Any:
    """Every VM an acknowledgement let proceed, with the event ids (whoever acknowledged)."""
    return {"released": {vm: list(ids) for vm, ids in state.released.items()}}


COMMANDS = {"azure/event": cmd_event, "azure/acks": cmd_acks, "azure/released": cmd_released}


def _find(state: AzureState, event_id: str) -> dict[str, Any]:
    for event in state.events:
        if event["EventId"] == event_id:
            return event
    raise BadCommand(f"no scheduled event {event_id!r}")
