"""Agent socket protocol: the sans-I/O core behind the checkpoint socket.

Workloads on the node connect to a Unix stream socket and speak
newline-delimited JSON (docs/agent-socket.md is the contract). This module
holds every decision of that conversation and none of its I/O: the adapter
(executor/agent_socket.py) feeds it bytes, peer credentials and the clock,
and carries out the actions it returns -- send these bytes to connection X,
close connection X, an ack arrived. Tests drive it with plain bytes.

Identity comes from the kernel, never from the message: the pid, uid and gid
of a registration are the socket's SO_PEERCRED values. A claimed pid that
differs is not an error (a pod sees its own pid namespace, so its claim
rarely matches the host's view); it is echoed back as ``claimed_pid`` and
counted. An ack can only ever acknowledge a still-active notice that this
connection was sent, so no client can speak for another.

Several notices may drain at once (a reclaim and a maintenance event; one
reclaim heard twice with deadlines apart). A client is told only the one that
governs it -- ``socket_wire.governing_notice``, the earliest deadline -- and
told again only when that changes, so it never flaps between them.

A client may ask for more time (``extend``): the grant rule is ``executor.extension``'s,
against the notice that governs it and the limit the executor passes with each notice
(``extend_limit``, never sent to clients). A grant lives with its connection; only a
client whose pod the agent can tell may have one (``connect(..., holdable=)``), so an
extension never holds up another workload's pod.

The line format, limits and error codes are ``executor.socket_wire``'s.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.timefmt import format_rfc3339, parse_rfc3339
from executor import extension
from executor.socket_wire import (
    ACK_STATUSES,
    MAX_DETAIL,
    MAX_ERRORS,
    MAX_EXTEND_S,
    MAX_LINE,
    MAX_NAME,
    MAX_NOTICE_ID,
    PROTOCOL_VERSION,
    Ack,
    Action,
    ClientInfo,
    Close,
    Extension,
    Peer,
    Reject,
    Send,
    decode_line,
    encode,
    error_line,
    governing_notice,
    is_text,
    validate_notice,
)


@dataclass(slots=True)
class _Conn:
    peer: Peer
    opened_at: float
    buf: bytearray
    line_since: float | None = None  # when the unfinished line in buf started
    client: int | None = None  # set by register
    name: str = ""
    errors: int = 0
    sent: dict[str, Any] | None = None  # the governing notice as last queued to this connection
    told: dict[str, float] = field(default_factory=dict)  # active notice id -> when first queued here
    acked: dict[str, str] = field(default_factory=dict)  # notice id -> this connection's recorded status
    holdable: bool = True  # its pod can be told, so an extension can hold that pod alone
    granted: dict[str, int] = field(default_factory=dict)  # active notice id -> granted checkpoint_by, ms
    extends: dict[str, int] = field(default_factory=dict)  # active notice id -> grants given on it

    @property
    def sent_id(self) -> str | None:
        return None if self.sent is None else self.sent["id"]


class AgentProtocol:
    """All connection state of the agent socket; every method returns the actions to carry out."""

    def __init__(self, *, max_clients: int = 1024, register_timeout_s: float = 30.0,
                 line_timeout_s: float = 10.0) -> None:
        if max_clients < 1 or register_timeout_s <= 0 or line_timeout_s <= 0:
            raise ValueError("max_clients and both timeouts must be positive")
        self.max_clients = max_clients
        self.register_timeout_s = register_timeout_s
        self.line_timeout_s = line_timeout_s
        self._conns: dict[int, _Conn] = {}
        self._timed: set[int] = set()  # connections with a running timer (unregistered or mid-line)
        self._next_client = 0
        self._notices: dict[str, dict[str, Any]] = {}  # every draining notice, by id
        self._limits: dict[str, int] = {}  # notice id -> the latest checkpoint_by a grant may give, ms
        self._governing: dict[str, Any] | None = None  # governing_notice(self._notices)
        self._counts: dict[str, int] = {}
        self._handlers = {"register": self._on_register, "ack": self._on_ack, "ping": self._on_ping,
                          "extend": self._on_extend}

    # -- connection lifecycle -------------------------------------------------

    def connect(self, conn: int, peer: Peer, now: float, holdable: bool = True) -> list[Action]:
        """A new connection; beyond max_clients it is told so and closed. ``holdable``: the shell
        could tell which pod the peer is in (an extension then holds that pod alone)."""
        self._count("accepted")
        if len(self._conns) >= self.max_clients:
            return self._fail(conn, "too_many_clients", f"the agent serves at most {self.max_clients} connections")
        self._conns[conn] = _Conn(peer=peer, opened_at=now, buf=bytearray(), holdable=holdable)
        self._timed.add(conn)
        return []

    def disconnect(self, conn: int, reason: str) -> None:
        """The adapter lost the connection (peer closed, reset, slow reader); idempotent."""
        if self._conns.pop(conn, None) is not None:
            self._timed.discard(conn)
            self._count(f"closed.{reason}")

    def receive(self, conn: int, data: bytes, now: float) -> list[Action]:
        """Bytes read from ``conn``: frame them into lines and handle each complete one."""
        c = self._conns.get(conn)
        if c is None:
            return []
        buf = c.buf
        fresh = len(buf)  # only new bytes can hold a newline: a byte-at-a-time sender costs O(n), not O(n^2)
        buf += data
        actions: list[Action] = []
        start = 0
        while conn in self._conns:
            end = buf.find(b"\n", max(start, fresh))
            if end < 0:
                break
            if end - start > MAX_LINE:
                return actions + self._fail(conn, "line_too_long", f"a line may hold at most {MAX_LINE} bytes")
            actions += self._handle_line(conn, c, bytes(buf[start:end]), now)
            start = end + 1
        if conn not in self._conns:
            return actions
        del buf[:start]
        if len(buf) > MAX_LINE:
            return actions + self._fail(conn, "line_too_long", f"a line may hold at most {MAX_LINE} bytes")
        if not buf:
            c.line_since = None
        elif c.line_since is None or start:
            c.line_since = now  # a new partial line began with this read
        self._retime(conn, c)
        return actions

    # -- timers ---------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When ``tick`` next has something to do (monotonic seconds), or None: no timer runs."""
        deadlines = [d for d in (self._deadline(self._conns[k]) for k in self._timed) if d is not None]
        return min(deadlines, default=None)

    def tick(self, now: float) -> list[Action]:
        """Close connections that did not register in time or left a line unfinished too long."""
        actions: list[Action] = []
        for conn in list(self._timed):
            c = self._conns[conn]
            if c.client is None and now >= c.opened_at + self.register_timeout_s:
                actions += self._fail(conn, "register_timeout",
                                      f"register within {self.register_timeout_s:g} s of connecting")
            elif c.line_since is not None and now >= c.line_since + self.line_timeout_s:
                actions += self._fail(conn, "line_timeout",
                                      f"a line must be completed within {self.line_timeout_s:g} s")
        return actions

    # -- notices --------------------------------------------------------------

    @property
    def active_notice(self) -> dict[str, Any] | None:
        """The notice that governs every client now (the earliest deadline), None if none drains."""
        return dict(self._governing) if self._governing else None

    @property
    def notices(self) -> list[dict[str, Any]]:
        """Every active notice, in no particular order."""
        return [dict(n) for n in self._notices.values()]

    def announce(self, notice: dict[str, Any], now: float) -> list[Action]:
        """Make ``notice`` the only active one (``set_notices`` with one notice)."""
        return self.set_notices([notice], now)

    def set_notices(self, notices: list[dict[str, Any]], now: float) -> list[Action]:
        """The notices that drain now, all of them (level-triggered: called every loop turn).

        Each client is told only the one that governs it (``governing_notice``), and again only
        when that changes: another id, or the same id with a changed deadline (acks given stand).
        A notice left out is no longer active: acks for it are refused from now on. Nothing is
        changed when one of ``notices`` is malformed (ValueError). A notice may carry
        ``extend_limit`` (RFC 3339, ``extension.extend_limit``): without it, extends are refused;
        a grant beyond a limit that moved earlier is cut to it."""
        fields = [validate_notice(n) for n in notices]
        limits = {f["id"]: extension.limit_ms_of(n) for f, n in zip(fields, notices, strict=True)}
        self._notices = {f["id"]: f for f in fields}
        self._limits = {k: v for k, v in limits.items() if v is not None}
        for c in self._conns.values():
            for book in (c.told, c.acked, c.granted, c.extends):
                for nid in [k for k in book if k not in self._notices]:
                    del book[nid]
            for nid, ms in c.granted.items():
                c.granted[nid] = min(ms, self._limits.get(nid, ms))
        return self._retell(now)

    def withdraw(self, notice_id: str, now: float = 0.0) -> list[Action]:
        """The notice was cancelled: clients it governed get a ``withdrawn`` line, then the notice
        that governs them now, if another one drains. Unknown ids are ignored."""
        self._notices.pop(notice_id, None)
        line = encode({"op": "withdrawn", "id": notice_id})
        actions: list[Action] = []
        self._limits.pop(notice_id, None)
        for conn, c in self._conns.items():
            c.told.pop(notice_id, None)
            c.acked.pop(notice_id, None)
            c.granted.pop(notice_id, None)
            c.extends.pop(notice_id, None)
            if c.sent_id == notice_id:
                c.sent = None
                actions.append(Send(conn, line))
        return actions + self._retell(now)

    def _retell(self, now: float) -> list[Action]:
        """Queue the governing notice to every registered client that was not sent it as it is."""
        self._governing = governing_notice(self._notices.values())
        if self._governing is None:
            return []
        line = encode({"op": "notice", **self._governing})
        return [self._send_notice(conn, c, line, now) for conn, c in self._conns.items()
                if c.client is not None and c.sent != self._governing]

    def clients(self) -> list[ClientInfo]:
        """Registered clients, oldest first; e.g. "has everyone answered?" for the drain."""
        out = []
        for c in self._conns.values():
            if c.client is not None:
                nid = c.sent_id
                acked = None if nid is None else c.acked.get(nid)
                grant = None if nid is None or acked is not None else c.granted.get(nid)
                out.append(ClientInfo(c.client, c.name, c.peer.pid, c.peer.uid, c.peer.gid, nid, acked,
                                      frozenset(k for k in c.acked if k in self._notices),
                                      None if grant is None else grant / 1000))
        return out

    def stats(self) -> dict[str, int]:
        """Counters (accepted, error.<code>, closed.<reason>, ...) plus the open/registered gauges."""
        out = dict(self._counts)
        out["open"] = len(self._conns)
        out["registered"] = sum(1 for c in self._conns.values() if c.client is not None)
        return out

    # -- message handling -----------------------------------------------------

    def _handle_line(self, conn: int, c: _Conn, line: bytes, now: float) -> list[Action]:
        if not line.strip():
            return []  # blank lines (a bare "\r" from nc -C) are not messages
        try:
            msg = decode_line(line)
            handler = self._handlers.get(msg["op"])
            if handler is None:
                raise Reject("unknown_op", f"unknown op {msg['op'][:64]!r}")
            return handler(conn, c, msg, now)
        except Reject as r:
            c.errors += 1
            if c.errors > MAX_ERRORS:
                return self._fail(conn, "too_many_errors", f"more than {MAX_ERRORS} errors on one connection")
            self._count(f"error.{r.code}")
            return [Send(conn, error_line(r.code, r.message))]

    def _on_register(self, conn: int, c: _Conn, msg: dict[str, Any], now: float) -> list[Action]:
        name, pid = msg.get("name"), msg.get("pid")
        if not is_text(name, MAX_NAME) or not name:
            raise Reject("bad_message", f"'name' must be a string of 1..{MAX_NAME} characters")
        if type(pid) is not int or pid <= 0:
            raise Reject("bad_message", "'pid' must be a positive integer")
        if c.client is not None:
            raise Reject("already_registered", f"this connection is already client {c.client}")
        self._next_client += 1
        c.client, c.name = self._next_client, name
        self._retime(conn, c)
        reply = {"op": "registered", "v": PROTOCOL_VERSION, "client": c.client, "name": name,
                 "pid": c.peer.pid, "uid": c.peer.uid, "gid": c.peer.gid}
        if pid != c.peer.pid:
            reply["claimed_pid"] = pid  # identity is the kernel's; the claim is only reported
            self._count("pid_mismatch")
        self._count("registrations")
        actions: list[Action] = [Send(conn, encode(reply))]
        if self._governing is not None:
            actions.append(self._send_notice(conn, c, encode({"op": "notice", **self._governing}), now))
        return actions

    def _on_ack(self, conn: int, c: _Conn, msg: dict[str, Any], now: float) -> list[Action]:
        nid, status = msg.get("id"), msg.get("status")
        detail, replay = msg.get("detail", ""), msg.get("replay", False)
        if not isinstance(nid, str) or status not in ACK_STATUSES:
            raise Reject("bad_message", "an ack needs a string 'id' and 'status' checkpointed|failed")
        if not is_text(detail, MAX_DETAIL) or not isinstance(replay, bool):
            raise Reject("bad_message", f"'detail' must be a string of at most {MAX_DETAIL} characters, "
                                         "'replay' a boolean")
        if c.client is None:
            raise Reject("not_registered", "register before acknowledging")
        if nid not in c.told:  # told only ever holds active notices this connection was sent
            raise Reject("unknown_notice", f"notice {nid[:64]!r} is not active for this client")
        recorded = c.acked.get(nid)
        reply = {"op": "acked", "id": nid, "status": recorded or status}
        if recorded is not None:
            return [Send(conn, encode(reply))]  # first ack wins; a repeat is answered, not recorded
        c.acked[nid] = status
        self._count("acks")
        ack = Ack(client=c.client, name=c.name, pid=c.peer.pid, uid=c.peer.uid, gid=c.peer.gid,
                  notice_id=nid, status=status, latency_s=max(0.0, now - c.told[nid]), detail=detail,
                  replay=replay)
        return [ack, Send(conn, encode(reply))]

    def _on_ping(self, conn: int, c: _Conn, msg: dict[str, Any], now: float) -> list[Action]:
        return [Send(conn, encode({"op": "pong"}))]

    def _on_extend(self, conn: int, c: _Conn, msg: dict[str, Any], now: float) -> list[Action]:
        nid, asked = msg.get("id"), msg.get("seconds")
        if not isinstance(nid, str) or type(asked) is not int or not 1 <= asked <= MAX_EXTEND_S:
            raise Reject("bad_message", f"an extend needs a string 'id' and integer 'seconds' of 1..{MAX_EXTEND_S}")
        if c.client is None:
            raise Reject("not_registered", "register before extending")
        reason = extension.refusal(told=nid in c.told, governing=nid == c.sent_id, answered=nid in c.acked,
                                   holdable=c.holdable, budget=nid in self._limits, grants=c.extends.get(nid, 0))
        new_ms = None
        if not reason:
            current = c.granted.get(nid)
            if current is None:
                current = round(parse_rfc3339(self._notices[nid]["checkpoint_by"]) * 1000)
            new_ms = extension.grant(current, asked, self._limits[nid])
            reason = "at_limit" if new_ms is None else ""
        if new_ms is None:
            return self._refuse_extend(conn, c, nid[:MAX_NOTICE_ID], asked, reason)
        c.granted[nid] = new_ms
        c.extends[nid] = c.extends.get(nid, 0) + 1
        self._count("extensions")
        by = format_rfc3339(new_ms / 1000)
        return [Extension(c.client, c.name, c.peer.pid, c.peer.uid, nid, asked, by),
                Send(conn, encode({"op": "extended", "id": nid, "checkpoint_by": by}))]

    def _refuse_extend(self, conn: int, c: _Conn, nid: str, asked: int, reason: str) -> list[Action]:
        """An ``extend_refused`` reply (an error reply: it counts towards MAX_ERRORS) and its record."""
        c.errors += 1
        if c.errors > MAX_ERRORS:
            return self._fail(conn, "too_many_errors", f"more than {MAX_ERRORS} errors on one connection")
        self._count("error.extend_refused")
        message = f"{reason}: {extension.REFUSALS[reason]}"
        return [Extension(c.client or 0, c.name, c.peer.pid, c.peer.uid, nid, asked, "", reason, message),
                Send(conn, error_line("extend_refused", message))]

    # -- helpers --------------------------------------------------------------

    def _send_notice(self, conn: int, c: _Conn, line: bytes, now: float) -> Send:
        if self._governing is None:   # only called while a notice drains
            raise RuntimeError("_send_notice without a governing notice")
        c.sent = self._governing
        c.told.setdefault(c.sent["id"], now)  # latency counts from the first time it was sent
        self._count("notices_sent")
        return Send(conn, line)

    def _fail(self, conn: int, code: str, message: str) -> list[Action]:
        """Reply with a closing error, forget the connection and close it."""
        self._count(f"error.{code}")
        self.disconnect(conn, code)
        return [Send(conn, error_line(code, message)), Close(conn, code)]

    def _deadline(self, c: _Conn) -> float | None:
        times = []
        if c.client is None:
            times.append(c.opened_at + self.register_timeout_s)
        if c.line_since is not None:
            times.append(c.line_since + self.line_timeout_s)
        return min(times, default=None)

    def _retime(self, conn: int, c: _Conn) -> None:
        if c.client is None or c.line_since is not None:
            self._timed.add(conn)
        else:
            self._timed.discard(conn)

    def _count(self, key: str) -> None:
        self._counts[key] = self._counts.get(key, 0) + 1
