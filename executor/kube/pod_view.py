"""The node's pods as a watch keeps them (pure: plain data, no I/O).

``reset`` with a list (its items and resourceVersion), then ``apply`` each watch event
in order. The Kubernetes watch contract (API concepts, "Efficient detection of changes"):
ADDED / MODIFIED carry the whole new object, DELETED the last state, BOOKMARK only a
newer resourceVersion to resume from, and ERROR a Status -- 410 Gone ("too old resource
version", reason Expired) when the watch cache no longer holds the resourceVersion asked
for; the client must then list again and watch from the new list's resourceVersion.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from executor.kube.pod_filters import pods_that_count

OK, RELIST = "ok", "relist"


def namespaces_of(pods: list[dict[str, Any]], counting: bool = False) -> frozenset[str]:
    """The namespaces of these pods (``counting``: of those that must still leave): the only
    namespaces whose PodDisruptionBudgets the drain reads."""
    chosen = pods_that_count(pods) if counting else pods
    return frozenset(str((p.get("metadata") or {}).get("namespace") or "") for p in chosen)


def _uid(pod: dict[str, Any]) -> str:
    md = pod.get("metadata") or {}
    return str(md.get("uid") or f"{md.get('namespace')}/{md.get('name')}")


@dataclass(slots=True)
class PodView:
    node: str
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)   # by uid
    resource_version: str = ""
    synced: bool = False
    changes: int = 0          # bumped by every change the view saw (the runner re-plans on it)
    listed_at: float = float("-inf")   # set by its watch (drain_io): when the list behind it was sent

    _snapshot: list[dict[str, Any]] | None = field(default=None, init=False, repr=False, compare=False)

    def reset(self, pods: list[dict[str, Any]], resource_version: str) -> None:
        self._snapshot = None
        self.pods = {_uid(p): p for p in pods if self._ours(p)}
        self.resource_version = resource_version
        self.synced = True
        self.changes += 1

    def _ours(self, pod: dict[str, Any]) -> bool:
        # A server ignoring the fieldSelector must not make the agent evict elsewhere.
        return str((pod.get("spec") or {}).get("nodeName") or "") == self.node

    def apply(self, event: dict[str, Any]) -> str:
        """One watch event; RELIST when the watch cannot go on from here (410, any ERROR)."""
        return apply_event(self, event, self._put, self._drop)

    def _drop(self, obj: dict[str, Any]) -> None:
        self.pods.pop(_uid(obj), None)
        self._snapshot = None

    def _put(self, obj: dict[str, Any]) -> None:
        if self._ours(obj):
            self.pods[_uid(obj)] = obj
        else:
            self.pods.pop(_uid(obj), None)
        self.changes += 1
        self._snapshot = None

    def snapshot(self) -> list[dict[str, Any]] | None:
        """The pods now, or None before the first list: the same list until the view changes (the
        drain reads it every turn, and a list it has planned already is not planned again)."""
        if not self.synced:
            return None
        if self._snapshot is None:
            self._snapshot = list(self.pods.values())
        return self._snapshot


class Resumable(Protocol):
    resource_version: str


def apply_event(view: Resumable, event: dict[str, Any], put: Callable[[dict[str, Any]], object],
                drop: Callable[[dict[str, Any]], object]) -> str:
    """The watch contract, for any view: ``put`` an ADDED / MODIFIED object, ``drop`` a DELETED
    one, RELIST on ERROR, skip an unknown type; the view resumes from the event's resourceVersion."""
    kind, obj = event.get("type"), event.get("object")
    if not isinstance(obj, dict):
        return OK
    if kind == "ERROR":
        return RELIST
    if kind in ("ADDED", "MODIFIED"):
        put(obj)
    elif kind == "DELETED":
        drop(obj)
    elif kind != "BOOKMARK":
        return OK   # an event type this client does not know: skip it, keep its place
    rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    if rv:
        view.resource_version = rv
    return OK
