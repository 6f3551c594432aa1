"""The on-premises hall's metadata endpoint (DESIGN section 4, ``sco``).

``GET /sco/v1/notice`` returns the relay payload of DESIGN section 3 as JSON,
or 404 when there is no notice. The control command builds a well-formed
payload from a few fields, or serves any JSON value verbatim (``raw``) so tests
can feed the agent bad input.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from common.timefmt import format_rfc3339
from tests.emulators._control import choice, moment
from tests.emulators._control import field as get
from tests.emulators._http import Request, Response, json_response

PATH = "/sco/v1/notice"
KINDS = ("reclaim", "rebalance", "maintenance", "cancel")
CONFIG_KEYS = ("node", "instance_id")


@dataclass
class ScoState:
    node: str = "node-emu-0"
    instance_id: str = "sco-emu-0"
    notice: Any = None  # the payload served; None = no notice (404)


def handle(state: ScoState, request: Request, now: float) -> Response:
    if request.path != PATH:
        return json_response(404, {"error": "not found"})
    if request.method != "GET":
        return json_response(405, {"error": "method not allowed"})
    if state.notice is None:
        return json_response(404, {"error": "no notice"})
    return json_response(200, state.notice)


def cmd_notice(state: ScoState, body: dict[str, Any], now: float) -> Any:
    """``clear``; or ``raw`` (any JSON, served as is); or fields of a valid payload."""
    if get(body, "clear", bool, False):
        state.notice = None
        return None
    if "raw" in body:
        state.notice = body["raw"]
        return state.notice
    issued = moment({"at": body.get("issued_at")}, now, 0.0)
    state.notice = {
        "v": 1,
        "id": get(body, "id", str, str(uuid.uuid4())),
        "kind": choice(body, "kind", KINDS, "reclaim"),
        "node": get(body, "node", str, state.node),
        "instance_id": get(body, "instance_id", str, state.instance_id),
        "issued_at": format_rfc3339(issued, millis=False),
        "deadline": format_rfc3339(moment(body, now, 120.0), millis=False),
        "source": get(body, "source", str, "sco"),
    }
    return state.notice


COMMANDS = {"sco/notice": cmd_notice}
