"""Every watch and every eviction of one drain, on the drain's own thread (adapter: sockets, a selector).

A drain used to be a coordinator thread, a thread per watch (the node's pods, each namespace's
PDBs) and up to 8 eviction workers: 14 threads for a node whose pods are in 3 namespaces, some
3,500 for the 500 agents of bench.fleet's one process, where every watch event paid for the GIL
and the context switches of all the others (docs/kubernetes.md, "API load"). Now the drain's one
thread waits in ``DrainIO.poll`` on one selector for whatever comes first: bytes of a watch, the
answer to an eviction, a retry or a deadline falling due, or a wake-up from the executor's loop
(new inputs, stop) through a pipe. However many PDBs, namespaces and pods, a drain is one thread.

Sockets are made as ``http.client`` makes them (the client's host, port, TLS context and SNI) but
never block: connect, TLS handshake, send and receive each go as far as the socket allows (``conn``),
and the bytes go to ``http_feed.ResponseFeed``. Every exchange is bounded: an eviction by the
client's ``timeout_s`` from connect to last byte (as ``common.http``), a watch by
``WATCH_TIMEOUT_S`` + 15 s without a byte. Lists -- a watch's first, a relist after 410, the
empty node's confirming LIST -- stay blocking calls of the drain's ``KubeApi`` (``common.http``,
one deadline each): rare, and each bounded.

A watch's life is ``executor.kube.watch``'s (``Watch``). An exception in the loop itself ends the drain's
thread, which the scheduler restarts (``KubeScheduler._restart_pause``).
"""
from __future__ import annotations

import os
import random
import selectors
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.supervise import Crash
from executor.kube.answers import answer_of, answer_raising
from executor.kube.api import SMP, CredentialsRefused, KubeApi, KubeError, Unreachable
from executor.kube.book_records import Action
from executor.kube.conn import Conn
from executor.kube.http_feed import FeedError, ResponseFeed
from executor.kube.pod_state import Answer
from executor.kube.pod_view import RELIST
from executor.kube.watch import RELIST_MIN_S, WATCH_QUIET_S, WATCH_TIMEOUT_S, Listed, V, Watch

IDLE_MAX = 8              # kept-alive eviction connections kept for the next ones


@dataclass(slots=True)
class Flight:
    uid: str
    method: str
    path: str
    sent_at: float     # MonoTime
    deadline: float    # MonoTime
    then: Action | None = None   # a DisruptionTarget mark's: the delete it goes before (``_marked``)


class DrainIO:
    """The drain's selector: its watches, its evictions in flight, and the loop's wake-ups."""

    def __init__(self, api: KubeApi, clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random,
                 mark: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
                 unmarked: Callable[[dict[str, Any], str], None] | None = None) -> None:
        self.api = api   # the drain's client: lists, discovery, the server's address and identity
        self._clock, self._rand = clock, rand
        # ``mark(pod)``: the DisruptionTarget patch a pod gets before a delete (None: none needed);
        # ``unmarked(pod, why)``: the mark failed and the delete goes ahead anyway (said, counted).
        self._mark, self._unmarked = mark, unmarked
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._wake_lock = threading.Lock()
        self._closed = False
        self.watches: list[Watch[Any]] = []
        self._flights: dict[int, tuple[Conn, Flight]] = {}   # by fd
        self._watch_fds: dict[int, Watch[Any]] = {}
        self._idle: dict[int, Conn] = {}
        self._answers: list[tuple[str, Answer]] = []
        self._changed = False
        self._crashes: list[Crash] = []

    # -- from any thread -------------------------------------------------------------------
    def wake(self) -> None:
        """Make ``poll`` return now (the loop's new inputs, a stop)."""
        with self._wake_lock:   # never a write to the pipe's number once closed (it may be reused)
            if self._closed:
                return
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass   # full: a wake-up is pending anyway

    # -- the drain's thread ------------------------------------------------------------------
    def add(self, watch: Watch[V]) -> Watch[V]:
        if watch.initial is not None:
            self._fill(watch, watch.initial, watch.initial_at)
            watch.initial, watch.last_list, watch.relist = None, self._clock(), False
        self.watches.append(watch)
        self._service(watch, self._clock())
        return watch

    def drop(self, watch: Watch[Any]) -> None:
        """Stop serving ``watch``: its connection closed, never listed or opened again."""
        self._close_watch(watch)
        self.watches = [w for w in self.watches if w is not watch]

    def in_flight(self) -> int:
        return len(self._flights)

    def take_crashes(self) -> list[Crash]:
        out, self._crashes = self._crashes, []
        return out

    def send(self, action: Action, marked: bool = False) -> None:
        """Send one eviction (or delete: its DisruptionTarget mark first, unless ``marked``); its
        answer comes out of a later ``poll``."""
        sent = self._clock()
        then: Action | None = None
        try:
            patch = (self._mark(action.pod) if action.op == "delete" and not marked and self._mark is not None
                     else None)
            if patch is not None:
                method, path, body = self.api.pod_status_call(action.pod, patch)
                request, then = self.api.wire(method, path, body, SMP), action
            else:
                method, path, body = self.api.pod_call(action.op, action.pod, action.grace_s)
                request = self.api.wire(method, path, body)
        except Exception as e:  # noqa: BLE001 -- NotOwnNode, EvictionUnsupported, discovery: answered
            self._answers.append((action.uid, answer_raising(e, sent, self._clock())))
            return
        conn = self._reuse()
        flight = Flight(action.uid, method, path, sent, sent + self.api.http.timeout_s, then)
        try:
            conn.begin(request, ResponseFeed(max_body=self.api.http.max_body))
            conn.step()
        except (OSError, FeedError) as e:
            self._lost(conn, flight, e)
            return
        self._flights[conn.fd] = (conn, flight)
        self._sel.register(conn.fd, conn.interest(), None)
        if conn.feed.complete:
            self._land(conn.fd)

    def poll(self, timeout_s: float) -> tuple[list[tuple[str, Answer]], bool]:
        """Wait at most ``timeout_s`` for something to happen; (answers that came, did anything change)."""
        now = self._clock()
        wait = max(0.0, min(timeout_s, self._next_due(now) - now))
        if not (self._answers or self._changed):
            for key, _ in self._sel.select(wait):
                self._ready(key.fd)
        now = self._clock()
        for w in self.watches:
            if w.conn is None and w.next_at <= now:
                self._service(w, now)
            elif w.conn is not None and now - w.heard_at >= WATCH_QUIET_S:
                self._close_watch(w)   # silent too long: resume from the last resourceVersion
                w.next_at = now
        for fd, (conn, flight) in list(self._flights.items()):
            if now >= flight.deadline:
                self._unregister(fd)
                del self._flights[fd]
                self._lost(conn, flight, TimeoutError(f"no complete answer within {self.api.http.timeout_s:g} s"))
        answers, self._answers = self._answers, []
        changed, self._changed = self._changed, False
        return answers, changed

    def close(self) -> None:
        for w in self.watches:
            self._close_watch(w)
        for fd, (conn, _) in list(self._flights.items()):
            self._unregister(fd)
            conn.close()
        for fd, conn in list(self._idle.items()):
            self._unregister(fd)
            conn.close()
        self._flights.clear()
        self._idle.clear()
        self._sel.close()
        with self._wake_lock:
            self._closed = True
            os.close(self._wake_r)
            os.close(self._wake_w)

    # -- inside ------------------------------------------------------------------------------
    def _next_due(self, now: float) -> float:
        due = [w.next_at if w.conn is None else w.heard_at + WATCH_QUIET_S for w in self.watches]
        due += [f.deadline for _, f in self._flights.values()]
        return min(due, default=now + 3600.0)

    def _ready(self, fd: int) -> None:
        if fd == self._wake_r:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
            self._changed = True
        elif fd in self._flights:
            self._on_flight(fd)
        elif fd in self._watch_fds:
            self._on_watch(self._watch_fds[fd])
        elif fd in self._idle:   # the server closed a kept-alive connection (or sent what nobody asked)
            self._unregister(fd)
            self._idle.pop(fd).close()

    def _unregister(self, fd: int) -> None:
        try:
            self._sel.unregister(fd)
        except (KeyError, ValueError):
            pass

    def _reuse(self) -> Conn:
        if self._idle:
            fd, conn = self._idle.popitem()
            self._unregister(fd)
            return conn
        return Conn(self.api.http)

    # -- evictions ---------------------------------------------------------------------------
    def _on_flight(self, fd: int) -> None:
        conn, flight = self._flights[fd]
        try:
            conn.step()
        except (OSError, FeedError) as e:
            self._unregister(fd)
            del self._flights[fd]
            self._lost(conn, flight, e)
            return
        if conn.feed.complete:
            self._land(fd)
        else:
            self._sel.modify(fd, conn.interest(), None)

    def _land(self, fd: int) -> None:
        conn, flight = self._flights.pop(fd)
        feed = conn.feed
        self._unregister(fd)
        now = self._clock()
        body = bytes(feed.body)
        if flight.then is None:
            self._answers.append((flight.uid, answer_of(
                lambda: self.api.settle(flight.method, flight.path, feed.status, feed.headers, body), flight.sent_at, now)))
        if feed.keep_alive and len(self._idle) < IDLE_MAX and conn.fd >= 0:
            self._idle[conn.fd] = conn
            self._sel.register(conn.fd, selectors.EVENT_READ, None)
        else:
            conn.close()
        if flight.then is not None:
            try:
                self.api.settle(flight.method, flight.path, feed.status, feed.headers, body)
            except (KubeError, Unreachable) as e:
                self._marked(flight.then, str(e))
            else:
                self._marked(flight.then, "")

    def _lost(self, conn: Conn, flight: Flight, e: Exception) -> None:
        """No answer (refused, reset, timeout) or not HTTP: the call failed as ``common.http`` says it."""
        conn.close()
        self.api._count(flight.method, flight.path, 0)
        what = f"{flight.method} {flight.path}"
        error: Exception
        if isinstance(e, ssl.SSLCertVerificationError):
            error = CredentialsRefused(0, "TLSVerificationFailed", f"{what}: {e}"[:500])
        else:
            error = Unreachable(f"{what}: {type(e).__name__}: {e}")
        if flight.then is not None:
            self._marked(flight.then, str(error))
            return
        self._answers.append((flight.uid, answer_raising(error, flight.sent_at, self._clock())))

    def _marked(self, delete: Action, failed: str) -> None:
        """The mark's answer is in: the delete goes, said first if it ``failed`` (a pod left in place
        dies at the deadline anyway, with no graceful stop: docs/kubernetes.md)."""
        if failed and self._unmarked is not None:
            self._unmarked(delete.pod, failed[:300])
        self.send(delete, marked=True)

    # -- watches -------------------------------------------------------------------------------
    def _fill(self, w: Watch[Any], listed: Listed, listed_at: float) -> None:
        view = w.new_view(self.api)
        view.listed_at = listed_at   # before the reset: a view may file its items under it
        view.reset(*listed)
        w.view, w.failure = view, None
        self._changed = True

    def _fail(self, w: Watch[Any], e: Exception, now: float) -> None:
        self._close_watch(w)
        w.failed(e, now, self._rand)
        self._changed = True

    def _crash(self, w: Watch[Any], e: Exception, now: float) -> None:
        """What nobody foresaw: this watch alone starts again, listing afresh, after a growing pause."""
        self._close_watch(w)
        self._crashes.append(w.crashed(e, now))
        self._changed = True

    def _service(self, w: Watch[Any], now: float) -> None:
        """List (if it must) and open the watch: the blocking part of a watch, bounded by the client."""
        try:
            if w.relist:
                if now < w.last_list + RELIST_MIN_S:
                    w.next_at = w.last_list + RELIST_MIN_S
                    return
                w.last_list = now
                w.lists += 1
                self._fill(w, w.list_at(self.api), now)
                w.relist = False
            self._open(w, now)
        except (Unreachable, KubeError) as e:
            self._fail(w, e, now)
        except Exception as e:  # noqa: BLE001 -- an answer nobody foresaw: that watch restarts, said
            self._crash(w, e, now)

    def _open(self, w: Watch[Any], now: float) -> None:
        if w.view is None:   # listed first (``_service``)
            raise KubeError(0, "WatchUnlisted", f"the {w.name} watch has no list to watch from")
        w.path = w.path_at(self.api, w.view.resource_version, WATCH_TIMEOUT_S)
        conn = Conn(self.api.http)
        w.watches += 1
        w.counted = False
        try:
            conn.begin(self.api.wire("GET", w.path), ResponseFeed(stream=True))
            conn.step()
        except (OSError, FeedError) as e:
            conn.close()
            self.api._count("WATCH", w.path, 0)
            raise Unreachable(f"GET {w.path}: {type(e).__name__}: {e}") from None
        w.conn, w.opened_at, w.heard_at = conn, now, now
        self._watch_fds[conn.fd] = w
        self._sel.register(conn.fd, conn.interest(), None)
        self._take(w, now)

    def _close_watch(self, w: Watch[Any]) -> None:
        conn, w.conn = w.conn, None
        if conn is not None:
            self._watch_fds.pop(conn.fd, None)
            self._unregister(conn.fd)
            conn.close()

    def _on_watch(self, w: Watch[Any]) -> None:
        now = self._clock()
        conn = w.conn
        if conn is None:
            return
        try:
            try:
                conn.step()
            except (OSError, FeedError) as e:
                if not conn.feed.head_done:
                    self.api._count("WATCH", w.path, 0)
                    self._fail(w, Unreachable(f"GET {w.path}: {type(e).__name__}: {e}"), now)
                    return
                conn.eof = True   # broken mid-stream: resume from the last resourceVersion seen
            w.heard_at = now
            self._take(w, now)
        except (Unreachable, KubeError) as e:
            self._fail(w, e, now)
        except Exception as e:  # noqa: BLE001 -- an event nobody foresaw: that watch restarts, said
            self._crash(w, e, now)

    def _refused(self, w: Watch[Any], conn: Conn) -> None:
        """A watch answered with an error: raised as its Status says (410: list again), once whole."""
        feed = conn.feed
        if feed.complete or conn.eof:
            self.api.settle("WATCH", w.path, feed.status, feed.headers, bytes(feed.body), ok=())
        else:
            self._sel.modify(conn.fd, conn.interest(), None)

    def _take(self, w: Watch[Any], now: float) -> None:
        """What the watch's connection has brought: its head, its events, its end."""
        conn = w.conn
        if conn is None or w.view is None:
            return
        feed = conn.feed
        if not feed.head_done:
            self._sel.modify(conn.fd, conn.interest(), None)
            return
        if feed.status != 200:
            self._refused(w, conn)
            return
        if not w.counted:   # the server answered: whatever failed before is over
            w.counted = True
            self.api._count("WATCH", w.path, 200)
            w.failure, w.errors, w.throttles = None, 0, 0
            self._changed = True
        for event in feed.take_events():
            self._changed = True
            if w.view.apply(event) == RELIST:
                self._close_watch(w)
                w.relist, w.next_at = True, now
                return
        if feed.refused:   # garbage from the server: said (drain.list_failed), then resumed
            raise KubeError(0, "WatchRefused", f"GET {w.path}: {feed.refused}")
        if conn.eof or feed.complete:   # the server ended the watch: resume from here
            self._close_watch(w)
            w.ended(now)
        else:
            self._sel.modify(conn.fd, conn.interest(), None)
