"""The object store: one global resourceVersion, CRUD with the real server's rules, a watch log.

Stored objects are plain dicts without ``apiVersion``/``kind`` (the HTTP layer adds the version
the client asked for). They are treated as immutable once stored: every write builds a new
dict, so watch events and readers can share them without copying under the lock.
Every committed write bumps the resourceVersion by one and appends exactly one watch event, so
"events after N" is a slice of a bounded deque.
"""
from __future__ import annotations

import copy
import itertools
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.timefmt import format_rfc3339

from . import strategy
from .errors import already_exists, bad_request, conflict, not_found
from .resources import DEFAULT_NAMESPACES, NAMESPACES, RESOURCES, ResourceType

# Fields only the server sets; client writes cannot change them.
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                "generation", "name", "namespace")
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    resource: str
    obj: dict[str, Any]
    old: dict[str, Any] | None
    at: float = 0.0  # the store's clock when written (a lagging watch delivers it later)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def _without_rv(obj: dict[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    out["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return out


class Store:
    """Thread-safe object store; ``cond`` is its lock and wakes watchers on every write."""

    def __init__(self, clock: Callable[[], float] = time.time, history: int = 20000) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.clock = clock
        self.closed = False
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {rt.name: {} for rt in RESOURCES}
        self._events: deque[WatchEvent] = deque(maxlen=history)
        self.reset()

    # ----- basics -----
    @property
    def resource_version(self) -> int:
        return self._rv

    def now_rfc3339(self) -> str:
        return format_rfc3339(self.clock(), millis=False)

    def reset(self) -> None:
        """Empty cluster with the default namespaces. The resourceVersion keeps rising."""
        with self.cond:
            for objects in self._objects.values():
                objects.clear()
            self._events.clear()
            for ns in DEFAULT_NAMESPACES:
                self.create(NAMESPACES, "", {"metadata": {"name": ns}})

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def _commit(self, rt: ResourceType, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if kind == "DELETED":
            self._objects[rt.name].pop(_key(obj), None)
        else:
            self._objects[rt.name][_key(obj)] = obj
        self._events.append(WatchEvent(self._rv, kind, rt.name, obj, old, self.clock()))
        self.cond.notify_all()
        return copy.deepcopy(obj)

    # ----- reads -----
    def find(self, rt: ResourceType, ns: str, name: str) -> dict[str, Any] | None:
        """The stored object itself (do not mutate) or None."""
        return self._objects[rt.name].get((ns if rt.namespaced else "", name))

    def get(self, rt: ResourceType, ns: str, name: str) -> dict[str, Any]:
        with self.cond:
            obj = self.find(rt, ns, name)
            if obj is None:
                raise not_found(rt.name, rt.group, name)
            return copy.deepcopy(obj)

    def snapshot(self, rt: ResourceType, accept: Callable[[dict[str, Any]], bool] = lambda o: True,
                 ) -> tuple[list[dict[str, Any]], int]:
        """Matching stored objects in etcd key order (namespace, name), and the current RV.

        The objects are shared, not copied: callers must not mutate them.
        """
        with self.cond:
            items = [o for k, o in sorted(self._objects[rt.name].items()) if accept(o)]
            return items, self._rv

    def events_after(self, rv: int) -> list[WatchEvent] | None:
        """Events newer than ``rv``; None when ``rv`` is older than the kept history (410 Gone)."""
        with self.cond:
            if rv >= self._rv:
                return []
            if not self._events or self._events[0].rv > rv + 1:
                return None
            return list(itertools.islice(self._events, rv + 1 - self._events[0].rv, None))

    def wait_for_change(self, after_rv: int, timeout: float) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self._rv > after_rv or self.closed, timeout)

    # ----- writes -----
    def create(self, rt: ResourceType, ns: str, obj: dict[str, Any], *, dry_run: bool = False,
               seeding: bool = False) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            body_ns = meta.get("namespace") or ns
            if ns and body_ns != ns:
                raise bad_request("the namespace of the provided object does not match the namespace "
                                  "sent on the request")
            meta["namespace"] = ns = body_ns or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_ALPHABET, k=5))
        strategy.prepare_create(rt, obj, seeding)
        strategy.validate(rt, obj)
        with self.cond:
            if rt.namespaced and self.find(NAMESPACES, "", ns) is None:
                if not seeding:
                    raise not_found("namespaces", "", ns)
                self.create(NAMESPACES, "", {"metadata": {"name": ns}})
            if self.find(rt, ns, meta["name"]) is not None:
                raise already_exists(rt.name, rt.group, meta["name"])
            for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
                meta.pop(k, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = self.now_rfc3339()
            if rt.tracks_generation:
                meta["generation"] = 1
            if dry_run:
                meta["resourceVersion"] = ""
                return obj
            return self._commit(rt, "ADDED", obj, None)

    def update(self, rt: ResourceType, ns: str, name: str, new: dict[str, Any], *,
               subresource: str = "", dry_run: bool = False) -> dict[str, Any]:
        """PUT semantics: RV/UID preconditions, status split, generation, no-op short-circuit."""
        return self.mutate(rt, ns, name, lambda _cur: new, subresource=subresource, dry_run=dry_run)

    def mutate(self, rt: ResourceType, ns: str, name: str,
               change: Callable[[dict[str, Any]], dict[str, Any]], *,
               subresource: str = "", dry_run: bool = False) -> dict[str, Any]:
        """Read-modify-write under the lock (PATCH is a mutate whose change applies the patch)."""
        with self.cond:
            cur = self.find(rt, ns, name)
            if cur is None:
                raise not_found(rt.name, rt.group, name)
            new = change(copy.deepcopy(cur))
            if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
                raise bad_request("the object must be a JSON object with object metadata")
            result = self._merge_update(rt, cur, copy.deepcopy(new), subresource)
            if _without_rv(result) == _without_rv(cur):
                return copy.deepcopy(cur)  # the real server skips no-op writes: no new RV
            if dry_run:
                return result
            committed = self._commit(rt, "MODIFIED", result, cur)
            meta = result["metadata"]
            if meta.get("deletionTimestamp") and not meta.get("finalizers") \
                    and meta.get("deletionGracePeriodSeconds", 0) == 0:
                committed = self._commit(rt, "DELETED", copy.deepcopy(result), result)
            return committed

    def _merge_update(self, rt: ResourceType, cur: dict[str, Any], new: dict[str, Any],
                      subresource: str) -> dict[str, Any]:
        new.pop("apiVersion", None)
        new.pop("kind", None)
        meta = new.setdefault("metadata", {})
        cur_meta = cur["metadata"]
        if meta.get("name", cur_meta["name"]) != cur_meta["name"]:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on "
                              f"the URL ({cur_meta['name']})")
        if rt.namespaced and meta.get("namespace", cur_meta["namespace"]) != cur_meta["namespace"]:
            raise bad_request("the namespace of the provided object does not match the namespace "
                              "sent on the request")
        if meta.get("resourceVersion") and meta["resourceVersion"] != cur_meta["resourceVersion"]:
            raise conflict(rt.name, rt.group, cur_meta["name"])
        if meta.get("uid") and meta["uid"] != cur_meta["uid"]:
            raise conflict(rt.name, rt.group, cur_meta["name"],
                           f"Precondition failed: UID in precondition: {meta['uid']}, "
                           f"UID in object meta: {cur_meta['uid']}")
        if subresource == "status":
            result = copy.deepcopy(cur)
            if "status" in new:
                result["status"] = new["status"]
            return result
        if rt.has_status:
            new.pop("status", None)
            if "status" in cur:
                new["status"] = copy.deepcopy(cur["status"])
        for k in _SYSTEM_META:
            meta.pop(k, None)
            if k in cur_meta:
                meta[k] = cur_meta[k]
        if rt.tracks_generation and new.get("spec") != cur.get("spec"):
            meta["generation"] = int(cur_meta.get("generation", 0)) + 1
        strategy.validate(rt, new)
        return new

    def delete(self, rt: ResourceType, ns: str, name: str, options: dict[str, Any], *,
               dry_run: bool = False) -> dict[str, Any]:
        """DELETE: preconditions, graceful pod deletion, finalizers; returns the object as left."""
        with self.cond:
            cur = self.find(rt, ns, name)
            if cur is None:
                raise not_found(rt.name, rt.group, name)
            strategy.check_preconditions(cur, options, conflict(rt.name, rt.group, name))
            grace = strategy.deletion_grace(rt, cur, options)
            if dry_run:
                return copy.deepcopy(cur)
            if rt is NAMESPACES:
                self._drop_namespace(name)
            return self._delete_with_grace(rt, cur, grace)

    def _delete_with_grace(self, rt: ResourceType, cur: dict[str, Any], grace: int) -> dict[str, Any]:
        meta = cur["metadata"]
        if grace == 0 and not meta.get("finalizers"):
            return self._commit(rt, "DELETED", copy.deepcopy(cur), cur)
        current_grace = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and current_grace is not None and current_grace <= grace:
            return copy.deepcopy(cur)  # a second delete may only shorten the grace period
        new = copy.deepcopy(cur)
        new["metadata"]["deletionTimestamp"] = format_rfc3339(self.clock() + grace, millis=False)
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        return self._commit(rt, "MODIFIED", new, cur)

    def remove(self, rt: ResourceType, ns: str, name: str, uid: str) -> bool:
        """What the kubelet does when a pod is gone: DELETE with grace 0 and a UID precondition."""
        with self.cond:
            cur = self.find(rt, ns, name)
            if cur is None or cur["metadata"].get("uid") != uid:
                return False
            self._delete_with_grace(rt, cur, 0)
            return True

    def _drop_namespace(self, ns: str) -> None:
        """Deleting a namespace removes its contents at once (no Terminating phase emulated)."""
        for rt in RESOURCES:
            if rt.namespaced:
                for obj in [o for (n, _), o in self._objects[rt.name].items() if n == ns]:
                    self._commit(rt, "DELETED", copy.deepcopy(obj), obj)

