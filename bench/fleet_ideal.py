"""The ideal drainer of bench/fleet.py: the server's capacity, measured on the same cluster.

What no real drainer can be: it knows every pod already (the observer's cache, no LIST), it has
no client-side rate limit, and it paces each PodDisruptionBudget exactly from its watched status
-- an eviction is sent only while ``status.disruptionsAllowed`` less its own evictions the
watched status does not list yet (``disruptedPods``: eviction.go writes the pod there in the same
status write that takes the room) is above zero -- so the server never refuses it for a budget.
Evictions go out on ``SENDERS`` threads, each eviction as the pod's node identity (the same APF
flows as the agents', through deploy/kubernetes's FlowSchema), and bench/fleet.py keeps one
eviction of a PDB in flight at a time (``per_pdb``): measured, the five a PDB allows sent at once
cost the server twice the CPU per pod (19.8 ms against 9.6; concurrent evictions of one PDB
conflict on its status write inside the eviction handler, the likely cause). Its evictions/s on a cluster sized
at or above the server's limit is the physical limit the agents are held to.

``IdealPacer`` is the pure part (plain data, no I/O): which pods to send now.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ujson

from common.http import HttpClient, HttpError, TlsFiles
from executor.kube.watch_stream import WatchStream

SENDERS = 48
Obj = dict[str, Any]


@dataclass
class _Budget:
    allowed: int = 0
    pending: set[str] = field(default_factory=set)   # sent (or accepted), not yet in a watched status
    in_flight: set[str] = field(default_factory=set)  # sent, no answer yet
    todo: list[str] = field(default_factory=list)    # pods not sent yet


class IdealPacer:
    """Per PDB (``ns/name``): the pods left to evict and the room the watched status gives."""

    def __init__(self, pods_by_pdb: dict[str, list[str]], per_pdb: int | None = None) -> None:
        """``per_pdb``: at most that many evictions of one PDB in flight (None: as many as its room)."""
        self.budgets = {k: _Budget(todo=sorted(v)) for k, v in pods_by_pdb.items()}
        self.per_pdb = per_pdb
        self.refused = 0

    def status(self, key: str, status: Obj) -> None:
        """A watched version of the PDB's status."""
        b = self.budgets.get(key)
        if b is None:
            return
        b.allowed = int(status.get("disruptionsAllowed") or 0)
        b.pending -= set((status.get("disruptedPods") or {}).keys())

    def take(self) -> list[tuple[str, str]]:
        """(pdb, pod) to send now: as many as each budget's room, no more."""
        out = []
        for key, b in self.budgets.items():
            room = b.allowed - len(b.pending)
            if self.per_pdb is not None:
                room = min(room, self.per_pdb - len(b.in_flight))
            while room > 0 and b.todo:
                pod = b.todo.pop()
                b.pending.add(pod)
                b.in_flight.add(pod)
                out.append((key, pod))
                room -= 1
        return out

    def answered(self, key: str, pod: str, status: int) -> None:
        b = self.budgets[key]
        b.in_flight.discard(pod)
        if status in (200, 201):
            return                   # stays pending until a watched status lists it
        b.pending.discard(pod)
        if status == 404:
            return                   # gone already
        if status == 429:
            self.refused += 1
        b.todo.append(pod)           # refused or no answer: again, when there is room

    def done(self) -> bool:
        return all(not b.todo for b in self.budgets.values())


class IdealDrainer:
    def __init__(self, url: str, ca_file: str, admin_token: str, node_tokens: dict[str, str],
                 pods: dict[str, list[Obj]], pdb_selector: Callable[[Obj], str], per_pdb: int | None = None) -> None:
        """``pods``: namespace -> its pods (all of them to evict); ``pdb_selector``: a pod's PDB name."""
        self._url, self._tls = url, TlsFiles(ca_file=ca_file)
        self._admin = {"Authorization": f"Bearer {admin_token}", "Accept": "application/json"}
        self._tokens = node_tokens
        by_pdb: dict[str, list[str]] = {}
        self._node_of: dict[str, str] = {}
        for ns, items in pods.items():
            for p in items:
                name = p["metadata"]["name"]
                by_pdb.setdefault(f"{ns}/{pdb_selector(p)}", []).append(name)
                self._node_of[f"{ns}/{name}"] = p["spec"]["nodeName"]
        self.pacer = IdealPacer(by_pdb, per_pdb)
        self._lock = threading.Lock()
        self._work: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self.requests = 0
        self._threads = [threading.Thread(target=self._watch, name="ideal-pdb-watch", daemon=True)] + [
            threading.Thread(target=self._send, name=f"ideal-evict-{i}", daemon=True) for i in range(SENDERS)]

    def start(self) -> IdealDrainer:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.close()
        for _ in range(SENDERS):
            self._work.put(None)
        for t in self._threads:
            t.join(15)

    def _dispatch(self) -> None:
        with self._lock:
            batch = self.pacer.take()
        for item in batch:
            self._work.put(item)

    def _watch(self) -> None:
        http = HttpClient(self._url, timeout_s=60.0, max_body=1 << 28, tls=self._tls)
        path = "/apis/policy/v1beta1/poddisruptionbudgets"
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    doc = ujson.loads(http.request("GET", path, headers=self._admin).body)
                    with self._lock:
                        for pdb in doc["items"]:
                            md = pdb["metadata"]
                            self.pacer.status(f"{md['namespace']}/{md['name']}", pdb.get("status") or {})
                    rv = doc["metadata"]["resourceVersion"]
                    self._dispatch()
                stream = self._stream = WatchStream(http, f"{path}?watch=1&resourceVersion={rv}&timeoutSeconds=600",
                                                    self._admin, read_timeout_s=630)
                stream.open()
                for event in stream.events():
                    if event["type"] == "ERROR":
                        rv = ""
                        break
                    pdb = event["object"]
                    md = pdb["metadata"]
                    rv = md.get("resourceVersion") or rv
                    if event["type"] in ("ADDED", "MODIFIED"):
                        with self._lock:
                            self.pacer.status(f"{md['namespace']}/{md['name']}", pdb.get("status") or {})
                        self._dispatch()
                stream.close()
            except (OSError, HttpError, ValueError, KeyError):
                rv = ""
                self._stop.wait(0.2)

    def _send(self) -> None:
        http = HttpClient(self._url, timeout_s=30.0, max_body=1 << 20, tls=self._tls)
        while True:
            item = self._work.get()
            if item is None or self._stop.is_set():
                break
            key, pod = item
            ns = key.split("/", 1)[0]
            token = self._tokens[self._node_of[f"{ns}/{pod}"]]
            body = ujson.dumps({"apiVersion": "policy/v1beta1", "kind": "Eviction",
                                "metadata": {"name": pod, "namespace": ns}}).encode()
            try:
                status = http.request("POST", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", body=body, headers={
                    "Authorization": f"Bearer {token}", "Accept": "application/json",
                    "Content-Type": "application/json"}).status
            except HttpError:
                status = 0
            with self._lock:
                self.requests += 1
                self.pacer.answered(key, pod, status)
            if status not in (200, 201):
                self._dispatch()
        http.close()
