"""One list + watch of a drain, as plain state (``Watch``), and the view it keeps (``View``).

``executor.kube.drain_io`` serves every watch of a drain on the drain's one thread: it lists (a
blocking call of the drain's client), opens the watch on a connection of its own, applies the
events to the view, and decides when to watch or list again; this is what it remembers of each.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from executor.kube.api import KubeApi
from executor.kube.conn import Conn


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

    def read(self, fn: Callable[[V], Any]) -> Any:
        """``fn(view)`` (None before the first list); raises the last failure (Unreachable, KubeError)
        while the watch has not been answered since."""
        if self.failure is not None:
            raise self.failure
        return fn(self.view) if self.view is not None else None
