"""Agent socket server: the non-blocking I/O shell around executor.socket_protocol.

It lives inside the executor's poll loop, so it never blocks and owns no
thread. All of its sockets (the listener and every client) sit in one private
epoll set, and that epoll fd is the single fd the outer loop polls: it turns
readable whenever any of them needs service. So the executor registers one fd
with its zmq.Poller (or a selector, in tests) and never tracks connections::

    server = AgentSocketServer("/run/sco-agent-socket/agent.sock", group="slurm")
    server.listen()
    poller.register(server.fileno(), zmq.POLLIN)
    while True:
        events = dict(poller.poll(timeout_ms))     # bound it by server.next_deadline()
        now = time.monotonic()
        if server.fileno() in events:
            server.process(now)
        server.tick(now)
        for ack in server.drain_acks(): ...
        for ext in server.drain_extensions(): ...

Not thread-safe: call it from the loop's thread only. Linux only (epoll, SO_PEERCRED).
"""
from __future__ import annotations

import errno
import grp
import os
import pwd
import select
import socket
import stat
import struct
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from executor.socket_protocol import AgentProtocol
from executor.socket_wire import Ack, Action, ClientInfo, Close, Extension, Peer, Send

_IN = select.EPOLLIN
_OUT = select.EPOLLOUT
_READ_SIZE = 64 * 1024
_ACCEPTS_PER_CALL = 64  # then let the outer loop serve others; epoll is level-triggered
_ACCEPT_PAUSE_S = 1.0  # out of fds: stop accepting for a moment instead of spinning
_PEERCRED = struct.Struct("3i")


class ServerLimits(NamedTuple):
    """What the server holds and how long it waits; the defaults suit a node.

    ``max_pending_bytes``: output held for a client beyond what the kernel buffer took; a client
    exceeding it is dropped (it is not reading). ``sndbuf``: SO_SNDBUF per client, None = system
    default. ``max_acks``: acks kept between drain_acks() calls (excess counted, not kept), and
    likewise extend outcomes between drain_extensions() calls."""

    max_clients: int = 1024
    register_timeout_s: float = 30.0
    line_timeout_s: float = 10.0
    max_pending_bytes: int = 8192
    sndbuf: int | None = None
    max_acks: int = 65536


DEFAULT_LIMITS = ServerLimits()


class AgentSocketError(RuntimeError):
    """The socket path cannot be used (someone listens on it, or it is not a socket)."""


class _Link:
    """One client socket and the bytes the kernel has not taken yet."""

    __slots__ = ("conn", "fd", "out", "sock", "writing")

    def __init__(self, conn: int, sock: socket.socket) -> None:
        self.conn, self.sock, self.fd = conn, sock, sock.fileno()
        self.out = bytearray()
        self.writing = False  # registered for EPOLLOUT


class AgentSocketServer:
    """The agent socket: listen, serve clients, broadcast notices, collect acks."""

    def __init__(self, path: str, *, mode: int = 0o660, owner: str | int | None = None,  # noqa: PLR0913 -- keyword-only, each with its default
                 group: str | int | None = None, dir_mode: int = 0o755,
                 limits: ServerLimits = DEFAULT_LIMITS, holdable: Callable[[int], bool] | None = None) -> None:
        """The socket file's ``mode``, ``owner``, ``group`` and its directory's ``dir_mode``; ``limits``;
        ``holdable(peer pid)``: whether the peer's pod can be told (None: every peer's can)."""
        # Resolve names now so a typo fails at start, not at the first bind.
        self._uid = _resolve(owner, lambda n: pwd.getpwnam(n).pw_uid)
        self._gid = _resolve(group, lambda n: grp.getgrnam(n).gr_gid)
        if limits.max_pending_bytes < 1 or limits.max_acks < 1:
            raise ValueError("max_pending_bytes and max_acks must be positive")
        self.path, self.mode, self.dir_mode = path, mode, dir_mode
        self.max_pending_bytes, self.sndbuf, self.max_acks = limits.max_pending_bytes, limits.sndbuf, limits.max_acks
        self._core = AgentProtocol(max_clients=limits.max_clients, register_timeout_s=limits.register_timeout_s,
                                   line_timeout_s=limits.line_timeout_s)
        self._ep: select.epoll | None = None
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket file we made
        self._links: dict[int, _Link] = {}  # by fd
        self._by_conn: dict[int, _Link] = {}
        self._next_conn = 0
        self._acks: list[Ack] = []
        self._extensions: list[Extension] = []
        self._holdable = holdable
        self._accept_paused_until: float | None = None
        self._counts: dict[str, int] = {}

    # -- lifecycle ------------------------------------------------------------

    def listen(self) -> None:
        """Create the parent dir, clear a stale socket file, bind with the configured mode/owner."""
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=self.dir_mode, exist_ok=True)
            os.chmod(parent, self.dir_mode)  # makedirs' mode is filtered by the umask: say it exactly
        _remove_stale(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.path)
            # Until listen() a connect is refused, so fixing mode and owner here leaves no window.
            os.chmod(self.path, self.mode)
            if self._uid != -1 or self._gid != -1:
                os.chown(self.path, self._uid, self._gid)
            st = os.lstat(self.path)
            self._inode = (st.st_dev, st.st_ino)
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._listener = sock
        self._ep = select.epoll()
        self._ep.register(sock.fileno(), _IN)

    def fileno(self) -> int:
        """The one fd the outer loop polls for reading; call process() when it is readable."""
        return self._listening()[1].fileno()

    def _listening(self) -> tuple[socket.socket, select.epoll]:
        """The listener and the epoll set: both exist from listen() to close(), and every link lives
        within that span, so only a call out of order finds them missing."""
        if self._listener is None or self._ep is None:
            raise RuntimeError("listen() first")
        return self._listener, self._ep

    def close(self) -> None:
        """Close every connection and the listener; unlink the socket file if it is still ours."""
        for link in list(self._links.values()):
            self._core.disconnect(link.conn, "server_closed")
            self._drop(link)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._ep is not None:
            self._ep.close()
            self._ep = None
        if self._inode is not None:
            try:
                st = os.lstat(self.path)
                if (st.st_dev, st.st_ino) == self._inode:  # a newer agent may have replaced it
                    os.unlink(self.path)
            except FileNotFoundError:
                pass
            self._inode = None

    # -- the loop's calls -----------------------------------------------------

    def process(self, now: float | None = None) -> None:
        """Serve whatever is ready (accepts, reads, writes); never blocks."""
        if self._listener is None or self._ep is None:
            return
        now = time.monotonic() if now is None else now
        listen_fd = self._listener.fileno()
        for fd, events in self._ep.poll(0):
            if fd == listen_fd:
                self._accept(now)
                continue
            link = self._links.get(fd)
            if link is not None and events & _OUT:
                self._flush(link)
            link = self._links.get(fd)  # the flush may have dropped it
            if link is not None and events & ~_OUT:  # IN, HUP or ERR: recv() tells which
                self._read(link, now)

    def tick(self, now: float | None = None) -> None:
        """Run the timers: register and line timeouts, resuming accepts after running out of fds."""
        now = time.monotonic() if now is None else now
        self._apply(self._core.tick(now))
        if (self._accept_paused_until is not None and now >= self._accept_paused_until
                and self._listener is not None and self._ep is not None):
            self._accept_paused_until = None
            self._ep.modify(self._listener.fileno(), _IN)

    def next_deadline(self) -> float | None:
        """The monotonic time tick() next has work, or None (idle: the loop may sleep indefinitely)."""
        times = [t for t in (self._core.next_deadline(), self._accept_paused_until) if t is not None]
        return min(times, default=None)

    def announce(self, notice: dict[str, Any], now: float | None = None) -> None:
        """Make ``notice`` (id, kind, deadline, checkpoint_by) the only active one and send it to every client."""
        self._apply(self._core.announce(notice, time.monotonic() if now is None else now))

    def set_notices(self, notices: list[dict[str, Any]], now: float | None = None) -> None:
        """Every notice that drains now; each client is sent the one that governs it, once."""
        self._apply(self._core.set_notices(notices, time.monotonic() if now is None else now))

    def withdraw(self, notice_id: str, now: float | None = None) -> None:
        """The notice was cancelled; clients it governed get a ``withdrawn`` line (then the next notice)."""
        self._apply(self._core.withdraw(notice_id, time.monotonic() if now is None else now))

    def drain_acks(self) -> list[Ack]:
        """The acks received since the last call, oldest first."""
        acks, self._acks = self._acks, []
        return acks

    def drain_extensions(self) -> list[Extension]:
        """The extend requests answered since the last call (grants and refusals), oldest first."""
        out, self._extensions = self._extensions, []
        return out

    def clients(self) -> list[ClientInfo]:
        """Registered clients and their answer to the active notice (None: not answered yet)."""
        return self._core.clients()

    def stats(self) -> dict[str, int]:
        """Protocol counters and gauges merged with the adapter's own (dropped acks, accept errors)."""
        out = self._core.stats()
        for key, n in self._counts.items():
            out[key] = out.get(key, 0) + n
        return out

    @property
    def active_notice(self) -> dict[str, Any] | None:
        return self._core.active_notice

    # -- I/O ------------------------------------------------------------------

    def _accept(self, now: float) -> None:
        listener, ep = self._listening()
        for _ in range(_ACCEPTS_PER_CALL):
            try:
                sock, _addr = listener.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # The connection stays queued and the listener stays readable: pause, don't spin.
                    self._count("accept_paused")
                    self._accept_paused_until = now + _ACCEPT_PAUSE_S
                    ep.modify(listener.fileno(), 0)
                    return
                self._count("accept_failed")  # e.g. ECONNABORTED: that client is gone already
                continue
            sock.setblocking(False)
            if self.sndbuf is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
            pid, uid, gid = _PEERCRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
            self._next_conn += 1
            link = _Link(self._next_conn, sock)
            self._links[link.fd] = link
            self._by_conn[link.conn] = link
            ep.register(link.fd, _IN)
            holdable = True if self._holdable is None else self._holdable(pid)
            self._apply(self._core.connect(link.conn, Peer(pid, uid, gid), now, holdable))

    def _read(self, link: _Link, now: float) -> None:
        try:
            data = link.sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, reason = b"", "reset"
        else:
            reason = "peer_closed"
        if not data:
            self._core.disconnect(link.conn, reason)
            self._drop(link)
            return
        self._apply(self._core.receive(link.conn, data, now))

    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                link = self._by_conn.get(action.conn)
                if link is not None:
                    self._send(link, action.data)
            elif isinstance(action, Close):
                link = self._by_conn.get(action.conn)
                if link is not None:
                    self._flush(link, final=True)
                    self._drop(link)
            elif isinstance(action, Extension):
                if len(self._extensions) < self.max_acks:
                    self._extensions.append(action)
                else:
                    self._count("extensions_dropped")
            elif len(self._acks) < self.max_acks:
                self._acks.append(action)
            else:
                self._count("acks_dropped")

    def _send(self, link: _Link, data: bytes) -> None:
        if not link.out:
            try:
                n = link.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self._core.disconnect(link.conn, "reset")
                self._drop(link)
                return
            data = data[n:]
            if not data:
                return
        link.out += data
        if len(link.out) > self.max_pending_bytes:
            # It stopped reading: holding more would let one client grow the agent without bound.
            self._core.disconnect(link.conn, "slow_reader")
            self._drop(link)
        elif not link.writing:
            link.writing = True
            self._listening()[1].modify(link.fd, _IN | _OUT)

    def _flush(self, link: _Link, final: bool = False) -> None:
        """Write pending output; ``final``: best effort before closing, errors ignored."""
        try:
            while link.out:
                n = link.sock.send(link.out)
                del link.out[:n]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            if not final:
                self._core.disconnect(link.conn, "reset")
                self._drop(link)
            return
        if not link.out and link.writing and not final:
            link.writing = False
            self._listening()[1].modify(link.fd, _IN)

    def _drop(self, link: _Link) -> None:
        self._links.pop(link.fd, None)
        self._by_conn.pop(link.conn, None)
        if self._ep is not None:
            try:
                self._ep.unregister(link.fd)
            except (OSError, ValueError):
                pass
        link.sock.close()

    def _count(self, key: str) -> None:
        self._counts[key] = self._counts.get(key, 0) + 1


def _resolve(value: str | int | None, lookup: Callable[[str], int]) -> int:
    """A user/group given by name or number; -1 (leave unchanged) for None."""
    if value is None:
        return -1
    if isinstance(value, int):
        return value
    return int(value) if value.isascii() and value.isdigit() else lookup(value)


def _remove_stale(path: str) -> None:
    """Unlink a leftover socket file nobody listens on; refuse anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise AgentSocketError(f"{path} exists and is not a socket; not removing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # a dead agent's socket: nothing listens
        return
    except FileNotFoundError:
        return
    except OSError as e:  # timeout: a listener with a full backlog is still a listener
        raise AgentSocketError(f"{path}: cannot tell whether it is in use ({e})") from e
    finally:
        probe.close()
    raise AgentSocketError(f"another process is listening on {path}")
