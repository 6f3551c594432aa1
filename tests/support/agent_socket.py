"""Test rig for the agent socket: the server in its own thread, raw clients, bounded waits.

The server is single-threaded by design, so the harness runs it in a loop
thread (selectors on its one fd, like the executor's zmq.Poller) and every
call from a test is marshalled into that thread through a wake-up socket.
"""
from __future__ import annotations

import json
import queue
import selectors
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from common.timefmt import format_rfc3339
from executor.agent_socket import AgentSocketServer
from executor.socket_wire import Ack
from tests.support.wait import wait_for


def make_notice(nid: str, deadline_in: float = 120.0, checkpoint_in: float = 90.0,
                kind: str = "reclaim") -> dict:
    now = time.time()
    return {"id": nid, "kind": kind, "deadline": format_rfc3339(now + deadline_in),
            "checkpoint_by": format_rfc3339(now + checkpoint_in)}


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.01,
               what: str = "condition") -> object:
    """Poll ``predicate`` until it is truthy (tests.support.wait.wait_for, errors not retried)."""
    return wait_for(predicate, timeout, what, interval, retry_on=())


class ServerThread:
    """An AgentSocketServer served by a selector loop in a background thread."""

    def __init__(self, path: str, **kwargs) -> None:
        self.server = AgentSocketServer(path, **kwargs)
        self.server.listen()
        self.path = path
        self._acks: list[Ack] = []
        self._lock = threading.Lock()
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._running = True
        # Made here, not in the thread: everything the loop needs exists before start() returns.
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.server.fileno(), selectors.EVENT_READ, "server")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._loop, name="agent-socket-server", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        sel = self._sel
        try:
            while self._running:
                deadline = self.server.next_deadline()
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                for key, _ in sel.select(timeout):
                    if key.data == "wake":
                        self._wake_r.recv(4096)
                        self._run_calls()
                    else:
                        self.server.process()
                self.server.tick()
                acks = self.server.drain_acks()
                if acks:
                    with self._lock:
                        self._acks.extend(acks)
        finally:
            sel.close()

    def _run_calls(self) -> None:
        while True:
            try:
                fn, fut = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                fut.set_result(fn(self.server))
            except BaseException as e:  # noqa: BLE001 -- handed back to the calling test
                fut.set_exception(e)

    def call(self, fn: Callable[[AgentSocketServer], object], timeout: float = 10.0) -> object:
        fut: Future = Future()
        self._calls.put((fn, fut))
        self._wake_w.send(b"x")
        return fut.result(timeout)

    def announce(self, notice: dict) -> None:
        self.call(lambda s: s.announce(notice))

    def withdraw(self, notice_id: str) -> None:
        self.call(lambda s: s.withdraw(notice_id))

    def stats(self) -> dict[str, int]:
        return self.call(lambda s: s.stats())

    def acks(self) -> list[Ack]:
        with self._lock:
            return list(self._acks)

    def stop(self) -> None:
        if not self._running:
            return
        self.call(lambda s: s.close())
        self._running = False
        self._wake_w.send(b"x")
        self._thread.join(10)
        self._wake_r.close()
        self._wake_w.close()


class RawClient:
    """A bare socket speaking the wire protocol, for tests that need byte-level control."""

    def __init__(self, path: str, timeout: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self._buf = b""

    def send(self, obj: dict | bytes) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode() + b"\n"
        self.sock.sendall(data)

    def read(self, timeout: float = 5.0) -> dict | None:
        """The next message; None if the server closed the connection. TimeoutError on timeout."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def read_op(self, op: str, timeout: float = 5.0) -> dict:
        """Skip messages until one with ``op``; AssertionError if the connection ends first."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self.read(max(0.001, deadline - time.monotonic()))
            assert msg is not None, f"connection closed while waiting for {op!r}"
            if msg.get("op") == op:
                return msg

    def register(self, name: str = "test", pid: int | None = None) -> dict:
        import os

        self.send({"op": "register", "name": name, "pid": os.getpid() if pid is None else pid})
        return self.read_op("registered")

    def closed(self, timeout: float = 5.0) -> bool:
        """True once the server has closed this connection (reads until EOF)."""
        try:
            while True:
                if self.read(timeout) is None:
                    return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


# Fixtures: re-exported by the conftest.py of every directory whose tests serve an agent socket.
@pytest.fixture
def sock_dir():
    # Not tmp_path: a Unix socket path must fit in 108 bytes and pytest's paths grow with test names.
    path = tempfile.mkdtemp(prefix="sco-as-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sock_path(sock_dir):
    return f"{sock_dir}/agent.sock"


@pytest.fixture
def serve(sock_path):
    """serve(**server_kwargs) -> a running ServerThread, stopped after the test."""
    started: list[ServerThread] = []

    def start(**kwargs) -> ServerThread:
        st = ServerThread(kwargs.pop("path", sock_path), **kwargs)
        started.append(st)
        return st

    yield start
    for st in started:
        st.stop()


def as_user(user: str, fn: Callable[[], dict], timeout: float = 20.0) -> dict:
    """Run ``fn`` in a forked child that dropped to ``user`` (its own uid and primary gid, no
    supplementary groups): what a workload running as that user could do. ``fn`` returns a JSON
    object; an exception in the child comes back as {"error": <errno name or type>, "detail": ...}.
    The tests run as root; this is how they see the socket as an unprivileged client does."""
    import errno
    import os
    import pwd

    entry = pwd.getpwnam(user)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery from here on, only os._exit
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            signal_alarm(timeout)
            out = fn()
        except OSError as e:
            out = {"error": errno.errorcode.get(e.errno or 0, "?"), "detail": str(e)}
        except BaseException as e:  # noqa: BLE001 -- reported to the parent, which asserts
            out = {"error": type(e).__name__, "detail": str(e)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    chunks = []
    with os.fdopen(r, "rb") as f:
        chunks.append(f.read())
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks) or b'{"error": "no_result"}')


def signal_alarm(seconds: float) -> None:
    """A child that hangs dies by SIGALRM instead of hanging the test run."""
    import signal

    signal.setitimer(signal.ITIMER_REAL, seconds)
