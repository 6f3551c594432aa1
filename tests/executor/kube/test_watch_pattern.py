"""A drain's watch (executor.kube.drain_io.Watch) against a scripted server: list at RV=0, watch from
the list's resourceVersion, resume a watch the server ended, list again on 410, wait Retry-After
when throttled, and let the drain see a failure while the server does not answer.

The lists are scripted calls; the watches are real HTTP/1.1 over a socket (chunked, one event a
line, as kube-apiserver writes them), served by a thread of the test."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import ujson

from executor.kube.api import KubeApi, KubeError, Throttled, Unreachable
from executor.kube.drain_io import DrainIO
from executor.kube.node_listing import pod_watch
from executor.kube.pod_view import PodView
from executor.kube.watch import Watch

NODE = "n1"


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"u-{name}", "resourceVersion": rv},
            "spec": {"nodeName": NODE}}


def chunked(events: list[dict[str, Any]]) -> bytes:
    body = b"".join(ujson.dumps(e).encode() + b"\n" for e in events)
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            + (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n")


class Script:
    """The server's watch answers, in turn (a list of events: sent, then the watch ended); when none
    is left, a quiet watch held open. Every list and watch is recorded in ``calls``."""

    def __init__(self, lists: list[Any], watches: list[list[dict[str, Any]]]) -> None:
        self.lists, self.watches = lists, watches
        self.calls: list[tuple[str, str]] = []
        self.quiet = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._open: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def list_at(self, api: KubeApi) -> tuple[list[dict[str, Any]], str]:
        self.calls.append(("list", "0"))
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            target = head.split(b" ", 2)[1].decode()
            self.calls.append(("watch", parse_qs(urlsplit(target).query)["resourceVersion"][0]))
            if self.watches:
                conn.sendall(chunked(self.watches.pop(0)))
                conn.close()
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                self._open.append(conn)   # a quiet watch: held open
                self.quiet.set()

    def close(self) -> None:
        self._sock.close()
        for c in self._open:
            c.close()


@pytest.fixture
def served() -> Iterator[Callable[[list[Any], list[list[dict[str, Any]]]], tuple[Script, DrainIO, Watch[PodView]]]]:
    made: list[tuple[Script, DrainIO]] = []

    def make(lists: list[Any], watches: list[list[dict[str, Any]]]) -> tuple[Script, DrainIO, Watch[PodView]]:
        script = Script(lists, watches)
        io = DrainIO(KubeApi(script.url, NODE, timeout_s=2.0))
        made.append((script, io))
        scripted = pod_watch(NODE)
        w = io.add(Watch("pods", script.list_at, scripted.path_at, scripted.new_view))
        return script, io, w
    yield make
    for script, io in made:
        io.close()
        script.close()


def run_until(io: DrainIO, done: Callable[[], Any], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        io.poll(0.05)


def names(w: Watch[PodView]) -> list[str]:
    return [p["metadata"]["name"] for p in w.read(PodView.snapshot) or []]


def test_list_from_the_cache_then_watch_resume_and_relist_after_410(served):
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    script, io, w = served(lists=[([pod("a", "5")], "10"), ([pod("b", "30")], "31")],
                           watches=[[{"type": "ADDED", "object": pod("c", "11")}],   # the server ends this watch
                                    [gone]])
    run_until(io, script.quiet.is_set)
    assert script.calls == [("list", "0"), ("watch", "10"), ("watch", "11"), ("list", "0"), ("watch", "31")]
    assert names(w) == ["b"]


def test_a_throttled_list_is_raised_to_the_drain_and_retried_after_retry_after(served):
    throttled = Throttled(429, "TooManyRequests", "Too many requests, please try again later.")
    throttled.retry_after = 0.2
    script, io, w = served(lists=[throttled, ([pod("a", "5")], "6")], watches=[])
    with pytest.raises(Throttled):
        w.read(PodView.snapshot)
    started = time.monotonic()
    run_until(io, script.quiet.is_set)
    assert time.monotonic() - started >= 0.2   # not before the server's Retry-After
    assert script.calls == [("list", "0"), ("list", "0"), ("watch", "6")]
    assert names(w) == ["a"]


def test_while_unanswered_the_drain_sees_the_failure(served):
    script, io, w = served(lists=[Unreachable("refused")] * 3 + [([], "1")], watches=[])
    with pytest.raises(Unreachable):
        w.read(PodView.snapshot)
    run_until(io, script.quiet.is_set, 30)
    assert w.read(PodView.snapshot) == []


def test_a_watch_whose_event_cannot_be_applied_says_so_then_lists_afresh(served, monkeypatch):
    """The watch alone restarts (the drain's loop goes on): said as a Crash, read as WatchCrashed
    until the new list, after common.supervise's first pause."""
    monkeypatch.setattr(PodView, "apply", lambda view, event: 1 / 0)
    script, io, w = served(lists=[([pod("a", "10")], "10"), ([pod("b", "20")], "20")],
                           watches=[[{"type": "MODIFIED", "object": pod("a", "11")}]])
    run_until(io, lambda: script.calls[-1:] == [("watch", "10")] and w.failure is not None)
    with pytest.raises(KubeError, match=r"WatchCrashed.*ZeroDivisionError"):
        w.read(PodView.snapshot)
    (crash,) = io.take_crashes()
    assert crash.thread == "watch-pods" and crash.restarts == 1 and crash.pause_s == 0.5
    monkeypatch.undo()
    run_until(io, script.quiet.is_set)
    assert names(w) == ["b"] and [c for c in script.calls if c[0] == "list"] == [("list", "0")] * 2
