"""The agent socket's wire format: its limits, the error-code table, one line's codec, and the
values the protocol core (``executor.socket_protocol``) hands its I/O shell (``executor.agent_socket``).

docs/agent-socket.md is the contract these implement; no state lives here.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from common.timefmt import parse_rfc3339

PROTOCOL_VERSION = 1
MAX_LINE = 64 * 1024  # bytes per line, newline excluded
MAX_NAME = 256
MAX_DETAIL = 1024
MAX_NOTICE_ID = 256
MAX_ERRORS = 16  # error replies on one connection before it is closed
ACK_STATUSES = ("checkpointed", "failed")
MAX_EXTEND_S = 86400  # most seconds one extend may ask for (the grant is capped by the budget anyway)
MAX_EXTENDS = 32  # grants per connection and notice: each one is an event, so a client cannot flood them

# The fixed error-code table: code -> does the agent close the connection after it?
ERROR_CODES: dict[str, bool] = {
    "bad_json": False,  # line is not UTF-8 JSON
    "bad_message": False,  # JSON, but not an object of the expected shape
    "unknown_op": False,
    "not_registered": False,  # ack before register
    "already_registered": False,
    "unknown_notice": False,  # ack for a notice this connection was not sent, or no longer active
    "extend_refused": False,  # extend that grants nothing (reason in the message; executor.extension)
    "line_too_long": True,
    "too_many_errors": True,
    "too_many_clients": True,
    "register_timeout": True,  # connected but did not register in time
    "line_timeout": True,  # a line started but did not end in time (slowloris)
}


@dataclass(frozen=True, slots=True)
class Peer:
    """SO_PEERCRED of a connection; pid 0 means the kernel could not map it to our pid namespace."""

    pid: int
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class Send:
    """Queue ``data`` (whole lines) on connection ``conn``."""

    conn: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """Flush what can be flushed, then close ``conn``; the core has already forgotten it."""

    conn: int
    reason: str


@dataclass(frozen=True, slots=True)
class Ack:
    """A client's answer to the active notice, attributed by peer credentials."""

    client: int
    name: str
    pid: int
    uid: int
    gid: int
    notice_id: str
    status: str
    latency_s: float  # from the notice being queued to this client until its ack arrived
    detail: str
    replay: bool  # the client acked this notice before, to an earlier agent instance


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """A registered client as the executor sees it: who, and where it stands on the active notice."""

    client: int
    name: str
    pid: int
    uid: int
    gid: int
    notice_id: str | None  # the notice that governs this client, once sent to it
    acked: str | None  # its recorded answer to notice_id, None while it has not answered
    answered: frozenset[str] = frozenset()  # every still-active notice it has acked
    extended_until: float | None = None  # its live extend grant on notice_id (epoch), None: none or acked


@dataclass(frozen=True, slots=True)
class Extension:
    """A client's extend request and what it got: a grant (``checkpoint_by``) or a refusal (``reason``)."""

    client: int
    name: str
    pid: int
    uid: int
    notice_id: str
    asked_s: int
    checkpoint_by: str  # the granted RFC 3339 time, "" when refused
    reason: str = ""    # the refusal's label (executor.extension.REFUSALS), "" when granted
    message: str = ""


Action = Send | Close | Ack | Extension


class Reject(Exception):
    """An error reply for the current line (internal control flow of the handlers)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def encode(msg: dict[str, Any]) -> bytes:
    """One wire line: compact, ASCII-only JSON plus a newline."""
    return json.dumps(msg, separators=(",", ":")).encode("ascii") + b"\n"


def error_line(code: str, message: str) -> bytes:
    """An error reply; ``code`` must be one of ERROR_CODES."""
    if code not in ERROR_CODES:
        raise KeyError(code)
    return encode({"op": "error", "code": code, "message": message})


def decode_line(line: bytes) -> dict[str, Any]:
    """Parse one line into a message object; ``Reject`` when it is not one."""
    try:
        # Decode explicitly: json.loads(bytes) would also guess UTF-16/32, which the contract excludes.
        msg = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError; deep nesting recurses
        raise Reject("bad_json", "line is not valid UTF-8 JSON") from None
    if not isinstance(msg, dict):
        raise Reject("bad_message", "a message must be a JSON object")
    if not isinstance(msg.get("op"), str):
        raise Reject("bad_message", "a message needs a string 'op'")
    return msg


def is_text(value: object, limit: int) -> bool:
    """A string short enough that also survives UTF-8 encoding (JSON allows lone surrogates)."""
    if not isinstance(value, str) or len(value) > limit:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_notice(notice: dict[str, Any]) -> dict[str, Any]:
    """The four notice fields clients see; ValueError if the executor passed something malformed."""
    nid, kind = notice.get("id"), notice.get("kind")
    if not isinstance(nid, str) or not 1 <= len(nid) <= MAX_NOTICE_ID:
        raise ValueError(f"notice id must be a string of 1..{MAX_NOTICE_ID} characters")
    if not isinstance(kind, str) or not kind:
        raise ValueError("notice kind must be a non-empty string")
    for key in ("deadline", "checkpoint_by"):
        value = notice.get(key)
        if not isinstance(value, str):
            raise ValueError(f"notice {key} must be an RFC 3339 string")  # noqa: TRY004 -- one error type for every bad notice
        parse_rfc3339(value)  # raises ValueError with the reason
    return {"id": nid, "kind": kind, "deadline": notice["deadline"],
            "checkpoint_by": notice["checkpoint_by"]}


def governing_notice(notices: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The one notice a client is told while several drain: the earliest deadline.

    The instance goes away at the earliest deadline, so that is the one a workload must have
    checkpointed by; a later one adds nothing it could act on. Ties go to the earlier
    ``checkpoint_by``, then the smaller id, so every turn (and every agent instance) picks the
    same one and a client is never switched between equals. ``notices`` are validated ones
    (``validate_notice``); None when there are none."""
    best: tuple[float, float, str] | None = None
    chosen = None
    for n in notices:
        key = (parse_rfc3339(n["deadline"]), parse_rfc3339(n["checkpoint_by"]), n["id"])
        if best is None or key < best:
            best, chosen = key, n
    return chosen
