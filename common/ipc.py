"""ZeroMQ endpoints, topics and socket helpers: the one place they are defined.

Every endpoint is an ``ipc://`` socket under the runtime directory, which is
created 0700 so no other user can connect. Messages are two frames:
``[topic, json-object]``; the topic comes first so SUB sockets filter by
prefix (as circus does). Receivers validate both frames and count anything
else as garbage instead of crashing on it.
"""
from __future__ import annotations

import os
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import ujson
import zmq

from common.log import Logger

# Endpoint names (file names under the runtime directory).
WATCHER_PUB = "watcher.pub"      # watcher -> executor, verifier: notice state, contract
EXECUTOR_PUB = "executor.pub"    # executor -> verifier: drain progress, checkpoint acks
VERIFIER_PUB = "verifier.pub"    # verifier -> executor: escalation; -> watcher: verdicts
SPOOL_INTAKE = "spool.intake"    # every process -> spool: events (DEALER -> ROUTER, acked)

# Topics; what each message holds, and its codec, is in common.wire.
T_NOTICE = b"notice"       # NoticeState: {"active": [notice...], "withdrawn": [id...], "gen", "arrivals", ...}
T_CONTRACT = b"contract"   # {"source", "contract": the current contract (common.contract.Contract.to_dict())}
T_PROGRESS = b"progress"   # {"notices": {id: DrainRecord without its memo}, "omitted": n}
T_ESCALATE = b"escalate"   # {"notices": {id: {"level": checkpoint_over|evict_over|final, "since": epoch}}}
T_VERDICT = b"verdict"     # {"notices": {id: {"outcome", "at"}}}: common.verdict.encode_verdict_news
T_EVENT = b"event"         # spool intake: one event object
T_ACK = b"ack"             # spool reply: {"ids": [event_id...]}

TOPICS = frozenset({T_NOTICE, T_CONTRACT, T_PROGRESS, T_ESCALATE, T_VERDICT, T_EVENT, T_ACK})
# What every socket accepts in one frame (ZMQ_MAXMSGSIZE). libzmq does not refuse a larger message:
# the receiving socket drops the connection ("If a peer sends a message larger than ZMQ_MAXMSGSIZE
# it is disconnected", zmq_setsockopt(3)), the sender's send has already succeeded, and a SUB
# reconnects only to be dropped again by the next re-announcement -- a deaf receiver, and silence.
# So each message is bounded by design (common/notice_state.py, common/progress.py: each within its budget, at
# their worst in tests/common/test_message_bounds.py), ``send`` refuses anything larger before it
# reaches the socket, and ``Disconnects`` counts what the receiving sockets dropped anyway.
MAX_MESSAGE = 256 * 1024

# Peers that are down must not cost CPU: zmq reconnects every 100 ms by default
# (about 0.9 millicores per socket, measured); back off to 2 s instead.
RECONNECT_IVL_MS = 100
RECONNECT_IVL_MAX_MS = 2000


class BadMessage(ValueError):
    """A frame set that is not one of ours: counted (by ``reason``, a bounded label) and dropped.

    Reasons from ``decode``: frames, topic, too_large, bad_json, not_object;
    receivers checking a message's shape use bad_shape (the default); ``send`` refuses with
    send_too_large (``TooLarge``); ``Disconnects`` counts peer_disconnected.
    """

    def __init__(self, detail: str, reason: str = "bad_shape") -> None:
        super().__init__(detail)
        self.reason = reason


class TooLarge(BadMessage):
    """A message ``send`` refused: its body is larger than its receivers accept (MAX_MESSAGE)."""

    def __init__(self, topic: bytes, size: int) -> None:
        super().__init__(f"{topic.decode('ascii', 'replace')} message of {size} bytes is over the "
                         f"{MAX_MESSAGE} bytes its receivers accept: not sent", "send_too_large")
        self.topic = topic
        self.size = size


def ensure_runtime_dir(path: str) -> str:
    """Create the runtime directory 0700 (and tighten it if it exists); OSError if it is not ours.

    Only its owner can create, replace or connect to the sockets inside it. A
    directory someone else owns (or a symlink to one) is refused: its owner
    could bind-squat a socket path before us, or loosen the mode again.
    """
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"runtime directory {path}: not a directory (a symlink?)")
    if st.st_uid != os.geteuid():
        raise PermissionError(f"runtime directory {path}: owned by uid {st.st_uid}, not by this "
                              f"process (uid {os.geteuid()}); refusing to put sockets in it")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


# pyzmq's generics: a Context makes Sockets, and a Socket's parameter is what it receives
# (bytes, for the synchronous sockets every process uses).
Socket = zmq.Socket[bytes]
Context = zmq.Context[Socket]


def endpoint(runtime_dir: str, name: str) -> str:
    return f"ipc://{os.path.join(runtime_dir, name)}"


def make_socket(ctx: Context, kind: int, **options: Any) -> Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    for name, value in options.items():
        sock.setsockopt(getattr(zmq, name), value)
    return sock


def bind(ctx: Context, kind: int, runtime_dir: str, name: str, **options: Any) -> Socket:
    """Bind ``name`` under the runtime dir; a stale socket file from a killed process is replaced."""
    sock = make_socket(ctx, kind, **options)
    path = os.path.join(runtime_dir, name)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    sock.bind(endpoint(runtime_dir, name))
    os.chmod(path, 0o600)
    return sock


def connect(ctx: Context, kind: int, runtime_dir: str, name: str, **options: Any) -> Socket:
    sock = make_socket(ctx, kind, **options)
    sock.connect(endpoint(runtime_dir, name))
    return sock


def subscriber(ctx: Context, runtime_dir: str, name: str, *topics: bytes) -> Socket:
    sock = connect(ctx, zmq.SUB, runtime_dir, name)
    for t in topics:
        sock.setsockopt(zmq.SUBSCRIBE, t)
    return sock


def encode(topic: bytes, body: dict[str, Any]) -> list[bytes]:
    return [topic, ujson.dumps(body, ensure_ascii=False, escape_forward_slashes=False).encode("utf-8")]


def decode(frames: list[bytes]) -> tuple[bytes, dict[str, Any]]:
    """Validate ``[topic, json-object]``; anything else raises BadMessage."""
    if len(frames) != 2:
        raise BadMessage(f"expected 2 frames, got {len(frames)}", "frames")
    topic, payload = frames
    if topic not in TOPICS:
        raise BadMessage(f"unknown topic {bytes(topic[:32])!r}", "topic")
    if len(payload) > MAX_MESSAGE:
        raise BadMessage("message too large", "too_large")
    try:
        body = ujson.loads(payload)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadMessage(f"invalid JSON: {e}", "bad_json") from None
    if not isinstance(body, dict):
        raise BadMessage("message body is not a JSON object", "not_object")
    return topic, body


def pending(sock: Socket) -> Iterator[list[bytes]]:
    """Every message waiting on ``sock`` right now, without blocking (the receivers' read loop)."""
    while True:
        try:
            yield sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return


def send(sock: Socket, topic: bytes, body: dict[str, Any],
         refused: Callable[[TooLarge], object] | None = None) -> bool:
    """Send without blocking; False if not sent.

    Not sent: the peer queue is full (level-triggered state is resent anyway), or the body is
    larger than its receivers accept -- then nothing reaches the socket (libzmq would have the
    receiver drop the connection, see MAX_MESSAGE) and ``refused`` gets the ``TooLarge`` to count
    and log; without ``refused`` it is raised.
    """
    frames = encode(topic, body)
    if len(frames[1]) > MAX_MESSAGE:
        err = TooLarge(topic, len(frames[1]))
        if refused is None:
            raise err
        refused(err)
        return False
    try:
        sock.send_multipart(frames, flags=zmq.NOBLOCK)
        return True
    except zmq.Again:
        return False


class Disconnects:
    """Notices the connections libzmq dropped on our receiving sockets, counts them by socket name,
    and connects those sockets again.

    A receiving socket drops the connection of a peer whose message is over its ZMQ_MAXMSGSIZE and
    says so only to a monitor: ``ZMQ_EVENT_DISCONNECTED``, "the socket was disconnected
    unexpectedly" (zmq_socket_monitor(3)). For libzmq that is a protocol error, after which the
    connecting side does not reconnect (src/session_base.cpp ``engine_error``: a protocol error
    terminates the session; only connection and timeout errors reconnect) -- measured: a SUB so
    dropped heard nothing for 10 s. So each such socket is disconnected and connected again here
    (harmless when the peer merely exited and libzmq was reconnecting anyway; level-triggered
    state arrives again within a second). ``take()`` does it all without blocking.
    """

    def __init__(self, runtime_dir: str, sockets: dict[str, Socket]) -> None:
        self.runtime_dir = runtime_dir
        self.sockets = sockets
        self.monitors = {name: sock.get_monitor_socket(zmq.EVENT_DISCONNECTED) for name, sock in sockets.items()}

    def take(self) -> dict[str, int]:
        """Disconnects since the last call, per socket name (only names with some); those sockets
        are connected again."""
        out: dict[str, int] = {}
        for name, mon in self.monitors.items():
            for frames in pending(mon):
                # Frame 1: the event number (16 bits, native order) then its value (zmq_socket_monitor(3));
                # read here rather than with zmq.utils.monitor, which imports asyncio into every process.
                if frames and int.from_bytes(frames[0][:2], sys.byteorder) == zmq.EVENT_DISCONNECTED:
                    out[name] = out.get(name, 0) + 1
        for name in out:
            addr = endpoint(self.runtime_dir, name)
            try:
                self.sockets[name].disconnect(addr)
            except zmq.ZMQError:
                pass   # the session is gone already: nothing to undo
            self.sockets[name].connect(addr)
        return out

    def fds(self) -> list[Socket]:
        return list(self.monitors.values())

    def close(self) -> None:
        """Stop each monitor, then close its socket: in that order, or libzmq may block the context's
        end on a monitor event nobody will read (libzmq #2083, #3575; pyzmq #1020)."""
        for name, mon in self.monitors.items():
            try:
                self.sockets[name].disable_monitor()
            except zmq.ZMQError:
                pass   # the socket is closed already: so is its monitor
            mon.close(linger=0)
        self.monitors = {}


# How long a process at its end waits for libzmq to let go of its context (``destroy``).
TERM_WAIT_S = 2.0


def destroy(ctx: zmq.Context[Any], log: Logger, disconnects: Disconnects | None = None,
            timeout_s: float = TERM_WAIT_S) -> bool:
    """A process's last word to ZeroMQ: the monitors stopped first (``Disconnects.close``), every
    socket closed without lingering, and the context ended -- waited for at most ``timeout_s``.

    zmq_ctx_term blocks until libzmq has let go of every socket, and libzmq's own issues show it
    blocking for good after a monitor (libzmq #1279, #2330, #2586): a unit stop then waits out
    TimeoutStopSec and SIGKILLs the worker (tests/chaos saw a verifier so held). What a process
    still had to say is flushed before this is called, so past the bound it ends anyway: the term
    goes on in a daemon thread, which the process's exit does not wait for (logged ``ipc.term_timeout``).
    False if it timed out."""
    if disconnects is not None:
        disconnects.close()
    done = threading.Thread(target=lambda: ctx.destroy(linger=0), name="zmq-term", daemon=True)
    done.start()
    done.join(timeout_s)
    if done.is_alive():
        log.warning("ipc.term_timeout", waited_s=timeout_s)
        return False
    return True
