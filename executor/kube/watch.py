"""One list + watch of a drain, as plain state (``Watch``), and the view it keeps (``View``).

``executor.kube.drain_io`` serves every watch of a drain on the drain's one thread: it lists (a
blocking call of the drain's client), opens the watch on a connection of its own, applies the
events to the view, and decides when to watch or list again; this is what it remembers of each.

A watch (``Watch``): list, then watch from the list's resourceVersion; when the server ends the
watch, watch again from the last resourceVersion seen; on 410 Gone (or any ERROR event) list
again, at most once per ``RELIST_MIN_S``. A throttled answer waits the server's Retry-After
with jitter (``pacing.throttled_delay``); no answer, or a refusal, ``pacing.error_delay``.
Meanwhile ``read`` raises the failure, so the drain's own handling of a server that is down sees
it as a failed list. An exception nobody foresaw (an event the view cannot apply) is a crash of
that watch alone, never a silent end: counted, kept as a ``common.supervise.Crash`` for the drain
to say (``agent.thread_restarted``), ``read`` raises ``WatchCrashed`` until the watch has listed
afresh after ``common.supervise.pause_for``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from common.supervise import HEALTHY_AFTER_S, Crash, pause_for
from executor.kube import pacing
from executor.kube.api import KubeApi, KubeError, Throttled
from executor.kube.conn import Conn

WATCH_TIMEOUT_S = 240     # the server ends a watch after this; resumed from the last resourceVersion
WATCH_QUIET_S = WATCH_TIMEOUT_S + 15.0   # no byte for this long: the watch is cut and resumed
CUT_SHORT_S = 0.9 * WATCH_TIMEOUT_S      # a watch the server ends sooner was cut short (``Watch.cut_short``)
RELIST_MIN_S = 1.0        # never list more often than this
RETRY_S = 1.0             # a watch the server cut at once waits this before the next


class View(Protocol):
    resource_version: str
    listed_at: float   # the monotonic time the list behind the view was sent

    def reset(self, items: list[dict[str, Any]], resource_version: str) -> None: ...

    def apply(self, event: dict[str, Any]) -> str: ...


V = TypeVar("V", bound=View)
Listed = tuple[list[dict[str, Any]], str]


class Watch(Generic[V]):
    """One list + watch and the view it keeps (``list_at(api)``: (items, resourceVersion);
    ``path_at(api, rv, timeout_s)``: the watch's path; ``new_view(api)``: an empty view).
    ``initial``: a list already made, sent at ``initial_at`` (monotonic): watch from it."""

    def __init__(self, name: str, list_at: Callable[[KubeApi], Listed],
                 path_at: Callable[[KubeApi, str, int], str], new_view: Callable[[KubeApi], V], *,
                 initial: Listed | None = None, initial_at: float = float("-inf")) -> None:
        self.name = name
        self.list_at, self.path_at, self.new_view = list_at, path_at, new_view
        self.initial, self.initial_at = initial, initial_at
        self.view: V | None = None
        self.failure: Exception | None = None
        self.conn: Conn | None = None
        self.path = ""
        self.counted = False
        self.relist = True
        self.next_at = float("-inf")     # MonoTime: when to list or watch again (while not open)
        self.last_list = float("-inf")
        self.opened_at = self.heard_at = float("-inf")
        self.errors = self.throttles = 0
        self.in_a_row = 0                # crashes in a row
        self.restarts = 0
        self.lists = self.watches = 0
        self.cut_short = 0               # watches the server ended well before their timeout

    def read(self, fn: Callable[[V], Any]) -> Any:
        """``fn(view)`` (None before the first list); raises the last failure (Unreachable, KubeError)
        while the watch has not been answered since."""
        if self.failure is not None:
            raise self.failure
        return fn(self.view) if self.view is not None else None

    def ended(self, now: float) -> None:
        """The server ended the watch (its connection closed): resumed from its last version, at
        once, or after RETRY_S if it ended at once. Ended well before its timeout, it was cut short:
        e.g. by 1.20's watch cache, closing a watcher it cannot feed (``node_listing``)."""
        if now - self.opened_at < CUT_SHORT_S:
            self.cut_short += 1
        self.next_at = now + (RETRY_S if now - self.opened_at < RELIST_MIN_S else 0.0)

    def failed(self, e: Exception, now: float, rand: Callable[[], float]) -> None:
        """The list or watch failed (its connection closed): when to try again, and what ``read``
        raises meanwhile. A throttled answer waits the server's Retry-After, jittered."""
        self.failure = e
        if isinstance(e, Throttled):
            self.throttles += 1
            self.next_at = now + pacing.throttled_delay(self.throttles, e.retry_after, rand)
            return
        # 410 as an HTTP status (not an ERROR event) also means: list again.
        self.relist = self.relist or (isinstance(e, KubeError) and e.status == 410)
        self.errors += 1
        self.next_at = now + pacing.error_delay(self.errors, rand)

    def crashed(self, e: Exception, now: float) -> Crash:
        """An exception nobody foresaw ended this watch (its connection closed): it lists afresh after
        a pause that grows with the crashes in a row; ``read`` raises WatchCrashed until then."""
        self.in_a_row = 1 if now - self.last_list >= HEALTHY_AFTER_S else self.in_a_row + 1
        self.restarts += 1
        crash = Crash(f"watch-{self.name}", f"{type(e).__name__}: {e}"[:300], self.restarts, pause_for(self.in_a_row))
        self.failure = KubeError(0, "WatchCrashed", f"the {crash.thread} watch ended on {crash.error}; "
                                                    f"restarted in {crash.pause_s:g} s, listing afresh")
        self.relist, self.next_at = True, now + crash.pause_s
        return crash
