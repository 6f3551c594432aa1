"""AWS EC2 instance metadata, IMDSv2, as AWS documents it.

- ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` (1..21600,
  anything else or missing -> 400; an ``X-Forwarded-For`` header -> 403) returns
  the token as text and echoes the granted TTL in the same header.
- Every GET needs ``X-aws-ec2-metadata-token``; missing, expired or unknown -> 401.
  With IMDSv1 enabled a request *without* a token is served, but a bad token
  is still 401, as on a real instance.
- Errors carry IMDS's small XHTML page ("404 - Not Found"), not JSON.
- ``spot/instance-action`` is 404 until a notice, then
  ``{"action": ..., "time": ...}``; ``spot/termination-time`` is the same time as
  plain RFC 3339 (only for terminate/stop). A notice's time is fixed when it is
  set, unless ``drift`` asks for AWS's own mock's pitfall (a new time per read).
- ``events/maintenance/scheduled`` lists events with times in Go's
  ``2 Jan 2006 15:04:05 GMT`` layout. An event keeps its entry when it moves to
  canceled/completed (its ``State`` says so and ``Description`` gains AWS's
  ``[Canceled]``/``[Completed]`` prefix) and also shows in ``history``.

Token expiry runs on the emulator clock, so a test fast-forwards instead of waiting.
"""
from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from common.timefmt import format_rfc3339
from tests.emulators._control import BadCommand, choice, moment
from tests.emulators._control import field as get
from tests.emulators._http import Request, Response

TOKEN_PATH = "/latest/api/token"
META_PREFIX = "/latest/meta-data/"
TTL_HEADER = "x-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "x-aws-ec2-metadata-token"
MAX_TTL = 21600
SPOT_ACTIONS = ("terminate", "stop", "hibernate")
MAINTENANCE_CODES = ("system-reboot", "instance-reboot", "system-maintenance",
                     "instance-retirement", "instance-stop")
MAINTENANCE_STATES = ("active", "completed", "canceled")
SERVER = "EC2ws"
CONFIG_KEYS = ("instance_id", "availability_zone", "imdsv1", "max_ttl")

_DIGITS = re.compile(r"^[0-9]{1,9}$")
_STATE_PREFIX = {"canceled": "[Canceled] ", "completed": "[Completed] "}


@dataclass
class SpotNotice:
    action: str
    at: float
    drift_s: float | None = None  # set: the time is now + drift_s on every read


@dataclass
class AwsState:
    instance_id: str = "i-0123456789abcdef0"
    availability_zone: str = "us-east-1a"
    imdsv1: bool = False
    max_ttl: int | None = None  # shortens every granted TTL, for tests of expiry
    tokens: dict[str, float] = field(default_factory=dict)  # token -> expiry (emulator clock)
    spot: SpotNotice | None = None
    rebalance_at: float | None = None
    maintenance: list[dict[str, Any]] = field(default_factory=list)


def maintenance_time(epoch: float) -> str:
    """Go's ``2 Jan 2006 15:04:05 GMT``: day without padding, English month."""
    d = datetime.fromtimestamp(epoch, tz=UTC)
    return f"{d.day} {d:%b %Y %H:%M:%S} GMT"


def handle(state: AwsState, request: Request, now: float) -> Response:
    if request.path == TOKEN_PATH:
        if request.method != "PUT":
            return _page(405, "Method Not Allowed")
        return _issue_token(state, request, now)
    if request.method != "GET":
        return _page(405, "Method Not Allowed")
    token = request.header(TOKEN_HEADER)
    if token is not None or not state.imdsv1:
        expiry = state.tokens.get(token) if token else None
        if expiry is None or expiry <= now:
            state.tokens.pop(token or "", None)
            return _page(401, "Unauthorized")
    if not request.path.startswith(META_PREFIX):
        return _page(404, "Not Found")
    leaf = _LEAVES.get(request.path[len(META_PREFIX):])
    text = leaf(state, now) if leaf else None
    if text is None:
        return _page(404, "Not Found")
    return Response(200, text.encode(), (("Content-Type", "text/plain"),), SERVER)


def _issue_token(state: AwsState, request: Request, now: float) -> Response:
    if request.header("x-forwarded-for") is not None:
        return _page(403, "Forbidden")  # IMDS refuses token requests that came via a proxy
    raw = (request.header(TTL_HEADER) or "").strip()
    if not _DIGITS.match(raw) or not 1 <= int(raw) <= MAX_TTL:
        return _page(400, "Bad Request")
    granted = min(int(raw), state.max_ttl) if state.max_ttl else int(raw)
    state.tokens = {t: exp for t, exp in state.tokens.items() if exp > now}
    token = secrets.token_urlsafe(42)
    state.tokens[token] = now + granted
    headers = (("Content-Type", "text/plain"),
               ("X-aws-ec2-metadata-token-ttl-seconds", str(granted)))
    return Response(200, token.encode(), headers, SERVER)


def _page(status: int, reason: str) -> Response:
    title = f"{status} - {reason}"
    body = ('<?xml version="1.0" encoding="iso-8859-1"?>\n'
            '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"\n'
            '\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
            '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n'
            f' <head>\n  <title>{title}</title>\n </head>\n'
            f' <body>\n  <h1>{title}</h1>\n </body>\n</html>\n')
    return Response(status, body.encode(), (("Content-Type", "text/html"),), SERVER)


def _spot_time(notice: SpotNotice, now: float) -> float:
    return now + notice.drift_s if notice.drift_s is not None else notice.at


def _instance_action(state: AwsState, now: float) -> str | None:
    if state.spot is None:
        return None
    when = format_rfc3339(_spot_time(state.spot, now), millis=False)
    return json.dumps({"action": state.spot.action, "time": when})


def _termination_time(state: AwsState, now: float) -> str | None:
    if state.spot is None or state.spot.action == "hibernate":
        return None
    return format_rfc3339(_spot_time(state.spot, now), millis=False)


def _rebalance(state: AwsState, now: float) -> str | None:
    if state.rebalance_at is None:
        return None
    return json.dumps({"noticeTime": format_rfc3339(state.rebalance_at, millis=False)})


def _render_events(events: list[dict[str, Any]]) -> str:
    return json.dumps([
        {**event, **{key: maintenance_time(event[key])
                     for key in ("NotBefore", "NotAfter", "NotBeforeDeadline")}}
        for event in events
    ])


_LEAVES: dict[str, Callable[[AwsState, float], str | None]] = {
    "instance-id": lambda state, now: state.instance_id,
    "instance-life-cycle": lambda state, now: "spot",
    "placement/availability-zone": lambda state, now: state.availability_zone,
    "spot/instance-action": _instance_action,
    "spot/termination-time": _termination_time,
    "events/recommendations/rebalance": _rebalance,
    "events/maintenance/scheduled": lambda state, now: _render_events(state.maintenance),
    "events/maintenance/history": lambda state, now: _render_events(
        [e for e in state.maintenance if e["State"] != "active"]),
}


# -- control commands: (state, body, now) -> JSON -----------------------------------

def cmd_spot(state: AwsState, body: dict[str, Any], now: float) -> Any:
    """Set (``action``, ``in_s``/``at``, ``drift``) or ``clear`` the interruption notice."""
    if get(body, "clear", bool, False):
        state.spot = None
        return None
    action = choice(body, "action", SPOT_ACTIONS, "terminate")
    default_in = 0.0 if action == "hibernate" else 120.0  # no 2-minute warning for hibernate
    if get(body, "drift", bool, False):
        state.spot = SpotNotice(action, 0.0, float(get(body, "in_s", (int, float), default_in)))
    else:
        state.spot = SpotNotice(action, moment(body, now, default_in))
    return {"action": action, "time": format_rfc3339(_spot_time(state.spot, now), millis=False)}


def cmd_rebalance(state: AwsState, body: dict[str, Any], now: float) -> Any:
    if get(body, "clear", bool, False):
        state.rebalance_at = None
        return None
    state.rebalance_at = moment(body, now, 0.0)
    return {"noticeTime": format_rfc3339(state.rebalance_at, millis=False)}


def cmd_maintenance(state: AwsState, body: dict[str, Any], now: float) -> Any:
    """``op``: add (code, in_s/at, duration_s, description, event_id) | state | remove | clear."""
    op = choice(body, "op", ("add", "state", "remove", "clear"))
    if op == "clear":
        state.maintenance.clear()
        return None
    if op == "add":
        not_before = moment(body, now, 3 * 86400.0)
        event = {
            "Code": choice(body, "code", MAINTENANCE_CODES, "system-reboot"),
            "Description": get(body, "description", str, "scheduled reboot"),
            "State": "active",
            "EventId": get(body, "event_id", str, f"instance-event-{secrets.token_hex(9)[:17]}"),
            "NotBefore": not_before,
            "NotAfter": not_before + float(get(body, "duration_s", (int, float), 7200)),
            "NotBeforeDeadline": not_before + float(get(body, "deadline_s", (int, float),
                                                        7 * 86400)),
        }
        state.maintenance.append(event)
        return {"event_id": event["EventId"]}
    event = _find_event(state, get(body, "event_id", str))
    if op == "remove":
        state.maintenance.remove(event)
        return None
    new_state = choice(body, "state", MAINTENANCE_STATES)
    description = event["Description"]
    for prefix in _STATE_PREFIX.values():
        description = description.removeprefix(prefix)
    event["State"] = new_state
    event["Description"] = _STATE_PREFIX.get(new_state, "") + description
    return {"event_id": event["EventId"], "state": new_state}


def cmd_tokens(state: AwsState, body: dict[str, Any], now: float) -> Any:
    """``invalidate``: forget every token (the next GET is 401); ``max_ttl``: cap new
    TTLs (0 or null: grant what is asked)."""
    if get(body, "invalidate", bool, False):
        state.tokens.clear()
    if "max_ttl" in body:
        cap = get(body, "max_ttl", int, 0)
        if not 0 <= cap <= MAX_TTL:
            raise BadCommand(f"max_ttl must be 0..{MAX_TTL}")
        state.max_ttl = cap or None
    return {"live_tokens": sum(1 for exp in state.tokens.values() if exp > now),
            "max_ttl": state.max_ttl}


def cmd_imdsv1(state: AwsState, body: dict[str, Any], now: float) -> Any:
    state.imdsv1 = get(body, "enabled", bool)
    return {"imdsv1": state.imdsv1}


COMMANDS = {
    "aws/spot": cmd_spot,
    "aws/rebalance": cmd_rebalance,
    "aws/maintenance": cmd_maintenance,
    "aws/tokens": cmd_tokens,
    "aws/imdsv1": cmd_imdsv1,
}


def _find_event(state: AwsState, event_id: str) -> dict[str, Any]:
    for event in state.maintenance:
        if event["EventId"] == event_id:
            return event
    raise BadCommand(f"no maintenance event {event_id!r}")
