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
from collections.abc import Iterator
from typing import Any

import ujson
import zmq

# Endpoint names (file names under the runtime directory).
WATCHER_PUB = "watcher.pub"      # watcher -> executor, verifier: notice state, contract
EXECUTOR_PUB = "executor.pub"    # executor -> verifier: drain progress, checkpoint acks
VERIFIER_PUB = "verifier.pub"    # verifier -> executor: escalation
SPOOL_INTAKE = "spool.intake"    # every process -> spool: events (DEALER -> ROUTER, acked)

# Topics; what each message holds, and its codec, is in common.wire.
T_NOTICE = b"notice"       # NoticeState: {"active": [notice...], "withdrawn": [id...], "gen", "arrivals", ...}
T_CONTRACT = b"contract"   # {"source", "contract": the current contract (common.contract.Contract.to_dict())}
T_PROGRESS = b"progress"   # {"notices": {id: DrainRecord}}
T_ESCALATE = b"escalate"   # {"notices": {id: {"level": checkpoint_over|evict_over|final, "since": epoch}}}
T_EVENT = b"event"         # spool intake: one event object
T_ACK = b"ack"             # spool reply: {"ids": [event_id...]}

TOPICS = frozenset({T_NOTICE, T_CONTRACT, T_PROGRESS, T_ESCALATE, T_EVENT, T_ACK})
MAX_MESSAGE = 256 * 1024

# Peers that are down must not cost CPU: zmq reconnects every 100 ms by default
# (about 0.9 millicores per socket, measured); back off to 2 s instead.
RECONNECT_IVL_MS = 100
RECONNECT_IVL_MAX_MS = 2000


class BadMessage(ValueError):
    """A frame set that is not one of ours: counted (by ``reason``, a bounded label) and dropped.

    Reasons from ``decode``: frames, topic, too_large, bad_json, not_object;
    receivers checking a message's shape use bad_shape (the default).
    """

    def __init__(self, detail: str, reason: str = "bad_shape") -> None:
        super().__init__(detail)
        self.reason = reason


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


def send(sock: Socket, topic: bytes, body: dict[str, Any]) -> bool:
    """Send without blocking; False if the peer queue is full (level-triggered state is resent anyway)."""
    try:
        sock.send_multipart(encode(topic, body), flags=zmq.NOBLOCK)
        return True
    except zmq.Again:
        return False
