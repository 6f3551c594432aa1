"""Keeps a view of the node's pods (or of one namespace's PDBs) current from a watch, in its
own thread (adapter).

The request pattern (issue 19: a hall reclaim makes every agent call the server at once):

1. ``GET /api/v1/pods?fieldSelector=spec.nodeName=N&resourceVersion=0`` -- served from the
   API server's watch cache, no etcd read (the PDBs: the drain's own paginated list, handed in);
2. ``GET ...&watch=1&resourceVersion=<the list's>&timeoutSeconds=WATCH_TIMEOUT_S`` -- every
   change is pushed; when the server ends the watch, watch again from the last
   resourceVersion seen (no list);
3. on 410 Gone (or any ERROR event) list again, at most once per ``RELIST_MIN_S``.

A throttled answer (429 without a DisruptionBudget cause) waits the server's Retry-After
with jitter (``pacing.throttled_delay``); no answer, or a refusal, waits
``pacing.error_delay`` (jittered, growing while it lasts). The coordinator asks ``pods()``
/ ``view()``: the view, or the watcher's last failure raised so the drain's own handling of
a server that is down (``runner._unanswered``) sees it as it saw a failed list.
"""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from common.supervise import Crash, Supervised
from executor.kube import pacing
from executor.kube.api import KubeApi, KubeError, Throttled, Unreachable
from executor.kube.pod_view import RELIST, PodView

WATCH_TIMEOUT_S = 240     # the server ends a watch after this; resumed from the last resourceVersion
RELIST_MIN_S = 1.0        # never list more often than this
RETRY_S = 1.0             # a watch the server cut at once waits this before the next


class View(Protocol):
    resource_version: str
    listed_at: float   # the watcher's clock when the list behind the view was sent

    def reset(self, items: list[dict[str, Any]], resource_version: str) -> None: ...

    def apply(self, event: dict[str, Any]) -> str: ...


V = TypeVar("V", bound=View)
Listed = tuple[list[dict[str, Any]], str]


class ListWatcher(Generic[V]):
    """``list_at(api)``: (items, resourceVersion); ``watch(api, rv, timeout_s)``: the events after
    it; ``new_view(api)``: an empty view. ``initial``: a list already made (watch from it), sent
    at ``initial_at`` on ``clock`` (monotonic): each view carries when its list was sent."""

    def __init__(self, make_api: Callable[[], KubeApi], on_change: Callable[[], None],  # noqa: PLR0913 -- the three calls by name
                 list_at: Callable[[KubeApi], Listed],
                 watch: Callable[[KubeApi, str, int], Iterator[dict[str, Any]]],
                 new_view: Callable[[KubeApi], V], *, initial: Listed | None = None,
                 initial_at: float = float("-inf"),
                 clock: Callable[[], float] = time.monotonic, rand: Callable[[], float] = random.random,
                 name: str = "watch") -> None:
        self._make_api = make_api
        self._on_change = on_change
        self._list_at, self._watch_of, self._new_view = list_at, watch, new_view
        self._initial = initial
        self._initial_at = initial_at
        self._clock = clock
        self._rand = rand
        self._lock = threading.Lock()
        self._view: V | None = None
        self._failure: Exception | None = None
        self._api: KubeApi | None = None
        # Supervised (common.supervise): an exception nobody foresaw (an event of a shape the view
        # cannot apply) restarts the thread, which lists afresh; meanwhile ``read`` raises it, so the
        # drain treats the view as a failed list instead of trusting one that stopped moving.
        self.worker = Supervised(name, self._main, on_crash=self._crashed)
        self._stop = self.worker.stopping
        self.lists = 0
        self.watches = 0

    def start(self) -> ListWatcher[V]:
        self.worker.start()
        return self

    def stop(self) -> None:
        self.worker.stop()
        api = self._api
        if api is not None:
            api.stop_watch()

    def read(self, fn: Callable[[V], Any]) -> Any:
        """``fn(view)`` under the lock (None before the first list); raises the last failure
        (Unreachable, KubeError) while the watcher has not been answered since."""
        with self._lock:
            if self._failure is not None:
                raise self._failure
            return fn(self._view) if self._view is not None else None

    def _set(self, failure: Exception | None) -> None:
        with self._lock:
            self._failure = failure
        self._on_change()

    def _fill(self, api: KubeApi, listed: Listed, listed_at: float) -> None:
        view = self._new_view(api)
        view.reset(*listed)
        view.listed_at = listed_at
        with self._lock:
            self._view, self._failure = view, None
        self._on_change()

    def _crashed(self, crash: Crash) -> None:
        self._set(KubeError(0, "WatchCrashed", f"the {crash.thread} thread ended on {crash.error}; "
                                                f"restarted in {crash.pause_s:g} s, listing afresh"))

    def _main(self, stopping: threading.Event) -> None:
        api = self._api = self._make_api()
        throttles = errors = 0
        last_list = float("-inf")
        relist = True
        initial, self._initial = self._initial, None   # used once: a restart lists afresh
        try:
            if initial is not None:
                self._fill(api, initial, self._initial_at)
                last_list, relist = self._clock(), False
            while not self._stop.is_set():
                try:
                    if relist:
                        self._stop.wait(max(0.0, last_list + RELIST_MIN_S - self._clock()))
                        last_list = self._clock()
                        self.lists += 1
                        self._fill(api, self._list_at(api), last_list)
                        relist = False
                    relist = self._follow(api)
                    throttles = errors = 0
                except Throttled as e:
                    throttles += 1
                    self._set(e)
                    self._stop.wait(pacing.throttled_delay(throttles, e.retry_after, self._rand))
                except (Unreachable, KubeError) as e:
                    # 410 as an HTTP status (not an ERROR event) also means: list again.
                    relist = relist or (isinstance(e, KubeError) and e.status == 410)
                    errors += 1
                    self._set(e)
                    self._stop.wait(pacing.error_delay(errors, self._rand))
        finally:
            api.close()

    def _follow(self, api: KubeApi) -> bool:
        """One watch, applied to the view; True if the view must be listed again."""
        view = self._view
        if view is None:   # only called after a list filled the view
            return True
        self.watches += 1
        started = self._clock()
        for event in self._watch_of(api, view.resource_version, WATCH_TIMEOUT_S):
            with self._lock:
                verdict = view.apply(event)
                self._failure = None
            if verdict == RELIST:
                return True
            self._on_change()
        with self._lock:
            self._failure = None   # the server answered and ended the watch: resume from here
        if self._clock() - started < RELIST_MIN_S:
            self._stop.wait(RETRY_S)   # a watch cut at once, again and again, must not spin
        return False


class PodWatcher(ListWatcher[PodView]):
    """The node's pods: listed from the watch cache (RV=0), then watched."""

    def __init__(self, make_api: Callable[[], KubeApi], on_change: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        super().__init__(make_api, on_change, lambda api: api.list_pods_at("0"),
                         lambda api, rv, timeout: api.watch_pods(rv, timeout), lambda api: PodView(api.node),
                         clock=clock, rand=rand, name="pod-watch")

    def pods(self) -> list[dict[str, Any]] | None:
        """The node's pods as last seen (None before the first list); raises the last failure."""
        pods: list[dict[str, Any]] | None = self.read(PodView.snapshot)
        return pods
