"""Checkpoint client for the sco-agent socket: hear the reclaim notice, answer "checkpoint done".

Standard library only, and nothing else of this package: copy this one file into a
workload (as checkpoint_client.py, say), or install sco-agent and import
``sco_checkpoint.client``. The contract it speaks is docs/agent-socket.md
(newline-delimited JSON over a Unix socket).

    from sco_checkpoint.client import on_notice    # vendored: from checkpoint_client import on_notice

    def save(notice):                 # runs in the listener thread
        write_checkpoint()            # return None/True: checkpointed; False or raise: failed

    on_notice(save)                   # returns at once; keeps listening across agent restarts
    run_the_work()

A checkpoint that needs longer than ``checkpoint_by`` allows may ask for more time from
inside the callback: ``extend(seconds)`` returns the new ``checkpoint_by`` the agent granted
(up to what the drain budget allows, so maybe less than asked; the answer counts), or
raises ``ExtendRefused``. Only this workload's pod waits for it.

The agent re-sends the active notice to every client after it restarts, so the
listener remembers the notices it answered: it never calls the callback twice
for one notice id, and re-sends its earlier answer (marked ``replay``) to the
new agent instead, which has no record of it.
"""
from __future__ import annotations

import json
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

DEFAULT_PATH = "/run/sco-agent-socket/agent.sock"
ENV_PATH = "SCO_AGENT_SOCKET"
MAX_LINE = 64 * 1024
BACKOFF_FIRST_S = 0.1
BACKOFF_CAP_S = 5.0  # notice windows are 30 s to 2 min: never wait long to get back on the socket
_REMEMBERED_ACKS = 64
Message = dict[str, Any]   # one decoded line of the protocol (docs/agent-socket.md)


def default_path() -> str:
    """$SCO_AGENT_SOCKET, else /run/sco-agent-socket/agent.sock."""
    return os.environ.get(ENV_PATH) or DEFAULT_PATH


def default_name() -> str:
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else f"pid-{os.getpid()}"


class ProtocolError(Exception):
    """The agent answered with an error line or something that is not the protocol."""


class ExtendRefused(ProtocolError):
    """The agent granted no extension (``extend_refused``; the message says why), or no notice
    was being answered to extend."""


class Connection:
    """One registered connection: read messages, send messages. Blocking, with timeouts."""

    def __init__(self, path: str | None = None, name: str | None = None,
                 timeout: float | None = 5.0) -> None:
        """Connect and register; OSError if the agent is not there, ProtocolError if it refuses."""
        self.path = path or default_path()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._buf = b""
        self._pending: list[Message] = []  # messages read while waiting for a specific reply
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(self.path)
            self.send({"op": "register", "name": name or default_name(), "pid": os.getpid()})
            self.registration = self._expect("registered", timeout)
        except BaseException:
            self._sock.close()
            raise

    def send(self, msg: Message) -> None:
        self._sock.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")

    def read(self, timeout: float | None) -> Message | None:
        """The next message; None on timeout; ConnectionError when the agent closed the socket."""
        if self._pending:
            return self._pending.pop(0)
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_LINE:
                raise ProtocolError("line from the agent exceeds 64 KiB")
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                return None
            if not chunk:
                raise ConnectionError("the agent closed the connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):   # RecursionError: nesting deeper than the parser goes
            raise ProtocolError(f"not JSON from the agent: {line[:80]!r}") from None
        if not isinstance(msg, dict):
            raise ProtocolError("a message from the agent is not an object")
        return msg

    def ack(self, notice_id: str, status: str, detail: str = "", replay: bool = False,
            timeout: float | None = 5.0) -> Message:
        """Send an ack and return the agent's ``acked`` reply; ProtocolError on an error reply."""
        msg: Message = {"op": "ack", "id": notice_id, "status": status}
        if detail:
            msg["detail"] = detail[:1024]
        if replay:
            msg["replay"] = True
        self.send(msg)
        return self._expect("acked", timeout)

    def extend(self, notice_id: str, seconds: int, timeout: float | None = 5.0) -> Message:
        """Ask for ``seconds`` more before this client's checkpoint_by; the agent's ``extended``
        reply (its ``checkpoint_by`` is the grant), or ExtendRefused."""
        self.send({"op": "extend", "id": notice_id, "seconds": int(seconds)})
        try:
            return self._expect("extended", timeout)
        except ProtocolError as e:
            if str(e).startswith("extend_refused:"):
                raise ExtendRefused(str(e)) from None
            raise

    def close(self) -> None:
        self._sock.close()

    def interrupt(self) -> None:
        """Wake a thread blocked in read() (it sees the connection closed); safe from another thread."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _expect(self, op: str, timeout: float | None) -> Message:
        """Read until the reply ``op``; a notice arriving meanwhile is kept for the next read()."""
        deadline = None if timeout is None else time.monotonic() + timeout
        held: list[Message] = []
        try:
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                msg = self._read_unpending(left)
                if msg is None:
                    raise ProtocolError(f"no {op!r} reply from the agent in time")
                if msg.get("op") == op:
                    return msg
                if msg.get("op") == "error":
                    raise ProtocolError(f"{msg.get('code')}: {msg.get('message')}")
                held.append(msg)
        finally:
            self._pending = self._pending + held

    def _read_unpending(self, timeout: float | None) -> Message | None:
        saved, self._pending = self._pending, []
        try:
            return self.read(timeout)
        finally:
            self._pending = saved


def wait_for_notice(timeout: float | None, path: str | None = None,
                    name: str | None = None) -> Message | None:
    """Block until a notice arrives (returned as a dict) or ``timeout`` seconds pass (None).

    If the agent is not up, keep trying to connect until the timeout: it may be restarting.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    attempt = 0
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        try:
            conn = Connection(path, name, timeout=min(5.0, left) if left is not None else 5.0)
            try:
                while True:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return None
                    msg = conn.read(left)
                    if msg is not None and msg.get("op") == "notice":
                        return msg
            finally:
                conn.close()
        except (OSError, ProtocolError):
            attempt += 1
            left = None if deadline is None else deadline - time.monotonic()
            delay = backoff(attempt)
            time.sleep(delay if left is None else max(0.0, min(delay, left)))


def ack_notice(notice_id: str, status: str = "checkpointed", detail: str = "",
               path: str | None = None, name: str | None = None, timeout: float = 5.0) -> Message:
    """Acknowledge the active notice over a fresh connection (for shell scripts); ProtocolError if refused."""
    conn = Connection(path, name, timeout=timeout)
    try:
        # The agent sends the active notice right after registering; the ack must name it.
        return conn.ack(notice_id, status, detail, timeout=timeout)
    finally:
        conn.close()


def backoff(attempt: int) -> float:
    """Capped exponential backoff with jitter: half fixed, half random, so restarts don't stampede."""
    ceiling = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2.0 ** min(attempt - 1, 16))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


class NoticeListener:
    """Keeps a registered connection to the agent and answers each notice through ``callback``."""

    def __init__(self, callback: Callable[[Message], object], path: str | None = None,
                 name: str | None = None, reconnect: bool = True) -> None:
        self.callback, self.path, self.name, self.reconnect = callback, path, name, reconnect
        self.answered: dict[str, tuple[str, str]] = {}  # notice id -> (status, detail), newest last
        self.connected = threading.Event()
        self._idle = threading.Event()  # clear while a notice is being answered
        self._idle.set()
        self._stop = threading.Event()
        self._conn: Connection | None = None
        self._thread: threading.Thread | None = None
        self.restarts = 0        # connections that ended on an exception nobody foresaw
        self.last_error = ""     # the latest of them, "<type>: <message>"
        self._answering: Message | None = None   # the notice whose callback runs now

    def start(self) -> NoticeListener:
        self._thread = threading.Thread(target=self.run, name="sco-notice-listener", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop listening and close the connection.

        A notice being answered is let finish (callback and ack) for up to ``timeout`` seconds first,
        so a workload exiting right after its checkpoint still gets its answer to the agent.
        """
        self._stop.set()
        self._idle.wait(timeout)
        conn = self._conn
        if conn is not None:
            conn.interrupt()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the listener thread to end; True if it has."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def run(self) -> None:
        """Serve until stop(), or until the first disconnect when ``reconnect`` is False. Whatever
        ends a connection -- the agent going, a line that is not the protocol, an exception nobody
        foresaw (counted in ``restarts``) -- it connects again after a backoff: the workload's
        listener never dies silently, or it would never hear of a notice again."""
        attempt = 0
        while not self._stop.is_set():
            try:
                self._conn = Connection(self.path, self.name)
                attempt = 0
                self.connected.set()
                self._serve(self._conn)
            except (OSError, ProtocolError):
                pass
            except Exception as e:  # noqa: BLE001 -- a listener must not die silently: counted, connected again
                self.restarts += 1
                self.last_error = f"{type(e).__name__}: {e}"[:300]
            finally:
                self.connected.clear()
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
            if not self.reconnect:
                return
            attempt += 1
            self._stop.wait(backoff(attempt))

    def _serve(self, conn: Connection) -> None:
        while not self._stop.is_set():
            msg = conn.read(None)
            if msg is None or msg.get("op") != "notice" or not isinstance(msg.get("id"), str):
                continue  # withdrawn, pong, future ops: nothing to do
            self._idle.clear()
            try:
                self._answer(conn, msg)
            finally:
                self._idle.set()

    def extend(self, seconds: int, timeout: float | None = 5.0) -> str:
        """From the callback (or while it runs): ask the agent for ``seconds`` more to checkpoint
        the notice being answered. Returns the granted checkpoint_by (RFC 3339; also written into
        the notice dict the callback got); ExtendRefused when nothing was granted."""
        notice, conn = self._answering, self._conn
        if notice is None or conn is None:
            raise ExtendRefused("no notice is being answered")
        reply = conn.extend(notice["id"], seconds, timeout)
        by = reply.get("checkpoint_by")
        if not isinstance(by, str):
            raise ProtocolError("an 'extended' reply without checkpoint_by")
        notice["checkpoint_by"] = by
        return by

    def _answer(self, conn: Connection, notice: Message) -> None:
        nid = notice["id"]
        replay = nid in self.answered
        if not replay:
            self._answering = notice
            _answering.append(self)
            _here.listener = self
            try:
                self._remember(nid, self._checkpoint(notice))
            finally:
                self._answering = _here.listener = None
                _answering.remove(self)
        status, detail = self.answered[nid]
        try:
            conn.ack(nid, status, detail, replay=replay)
        except ProtocolError:
            pass  # e.g. withdrawn meanwhile: the agent no longer wants the answer

    def _checkpoint(self, notice: Message) -> tuple[str, str]:
        try:
            result = self.callback(notice)
        except Exception as e:  # noqa: BLE001 -- any failure of the workload is an answer, not our crash
            return "failed", f"{type(e).__name__}: {e}"
        return ("failed", "") if result is False else ("checkpointed", "")

    def _remember(self, nid: str, outcome: tuple[str, str]) -> None:
        self.answered[nid] = outcome
        while len(self.answered) > _REMEMBERED_ACKS:
            self.answered.pop(next(iter(self.answered)))


_answering: list[NoticeListener] = []   # the listeners whose callback runs now, newest last
_here = threading.local()                # .listener: the one whose callback runs in this thread


def extend(seconds: int, timeout: float | None = 5.0) -> str:
    """``NoticeListener.extend`` of the listener whose callback runs in this thread (else the
    newest one answering): the granted checkpoint_by, or ExtendRefused."""
    listener = getattr(_here, "listener", None) or (_answering[-1] if _answering else None)
    if listener is None:
        raise ExtendRefused("no notice is being answered")
    return listener.extend(seconds, timeout)


def on_notice(callback: Callable[[Message], object], path: str | None = None,
              name: str | None = None, reconnect: bool = True, block: bool = False) -> NoticeListener:
    """Call ``callback(notice)`` for each new notice and ack the outcome to the agent.

    The callback returning anything but False (None included) acks ``checkpointed``; returning
    False or raising acks ``failed``. It runs in a daemon thread unless ``block`` is True, in
    which case this call serves in the caller's thread until the listener is stopped (or, with
    ``reconnect=False``, until the agent goes away).
    """
    listener = NoticeListener(callback, path, name, reconnect)
    if block:
        listener.run()
        return listener
    return listener.start()
