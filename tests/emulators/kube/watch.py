"""Watch streams: which events a watcher sees, in the real server's order and shape.

``watch_events`` yields the ``{"type", "object"}`` dicts of one watch; the HTTP layer writes
each as one chunk. Filtering follows the watch cache: an object that stops matching the
selectors is sent as DELETED, one that starts matching as ADDED.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .errors import status_body
from .resources import ResourceType, api_version_of
from .store import Store, WatchEvent
from .table import to_table

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def present(rt: ResourceType, version: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as served at ``version``: kind and apiVersion first, like the real encoder."""
    return {"kind": rt.kind, "apiVersion": api_version_of(rt, version), **obj}


@dataclass(frozen=True)
class WatchRequest:
    rt: ResourceType
    version: str
    accept: Callable[[dict[str, Any]], bool]
    resource_version: str  # "" or "0": start with the current state as ADDED events
    timeout: float
    send_initial_events: bool = False  # watch-list: initial state, then an end-marking BOOKMARK
    table: str | None = None  # events as one-row Tables (kubectl get -w); value: includeObject


def classify(event: WatchEvent, accept: Callable[[dict[str, Any]], bool]) -> str | None:
    """The event type this watcher sees, or None when the change is invisible to it."""
    now_matches = accept(event.obj)
    if event.type == "MODIFIED":
        was = event.old is not None and accept(event.old)
        if now_matches and was:
            return "MODIFIED"
        if now_matches:
            return "ADDED"
        return "DELETED" if was else None
    return event.type if now_matches else None


def _too_old(rv: int, current: int) -> dict[str, Any]:
    return {"type": "ERROR", "object": status_body(410, f"too old resource version: {rv} ({current})",
                                                   reason="Expired")}


def watch_events(store: Store, req: WatchRequest, clock: Callable[[], float],
                 stopped: Callable[[], bool], lag: Callable[[], float] = lambda: 0.0) -> Iterator[dict[str, Any]]:
    """Events for one watch until its timeout, the server stopping, or a 410; ``lag()``: seconds
    each change reaches this watcher after it was written (``Options.watch_lag``)."""
    first = True

    def render(obj: dict[str, Any]) -> dict[str, Any]:
        nonlocal first
        if req.table is None:
            return present(req.rt, req.version, obj)
        doc = to_table(req.rt, req.version, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]},
                       clock(), req.table)
        if not first:
            doc["columnDefinitions"] = []  # the real server sends the columns once per watch
        first = False
        return doc

    for event in _raw_events(store, req, clock, stopped, lag):
        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
            event["object"] = render(event["object"])
        yield event


def _held_until(due: float, deadline: float, clock: Callable[[], float], stopped: Callable[[], bool]) -> bool:
    """Wait until ``due``; False if the watch ends first (its timeout, or the server stopping)."""
    while (now := clock()) < due:
        if stopped() or now >= deadline:
            return False
        time.sleep(min(0.05, due - now))
    return True


def _raw_events(store: Store, req: WatchRequest, clock: Callable[[], float],
                stopped: Callable[[], bool], lag: Callable[[], float]) -> Iterator[dict[str, Any]]:
    deadline = clock() + req.timeout
    if req.resource_version in ("", "0") or req.send_initial_events:
        items, last = store.snapshot(req.rt, req.accept)
        for obj in items:
            yield {"type": "ADDED", "object": obj}
        if req.send_initial_events:
            yield {"type": "BOOKMARK", "object": {
                "kind": req.rt.kind, "apiVersion": api_version_of(req.rt, req.version),
                "metadata": {"resourceVersion": str(last), "annotations": {INITIAL_EVENTS_END: "true"}}}}
    else:
        last = int(req.resource_version)
    while not stopped():
        remaining = deadline - clock()
        if remaining <= 0:
            return
        events = store.events_after(last)
        if events is None:
            yield _too_old(last, store.resource_version)
            return
        if not events:
            store.wait_for_change(last, min(remaining, 0.5))
            continue
        for ev in events:
            if ev.resource != req.rt.name:
                last = ev.rv
                continue
            kind = classify(ev, req.accept)
            if kind is not None:
                # A lagging watch: the change is sent that long after its write; a watch that ends
                # first never sent it, and the client's next watch from its last RV gets it again.
                if not _held_until(ev.at + lag(), deadline, clock, stopped):
                    return
                yield {"type": kind, "object": ev.obj}
            last = ev.rv
