"""The cluster of bench/fleet.py: N nodes of 30 pods under PDBs on the real kube-apiserver 1.20.2.

What the real-server tier's ``FakeControlPlane`` does (tests/rigs/kube_real_objects.py) -- a fake
kubelet finishing graceful deletions, a fake disruption controller writing PDB status -- at fleet
scale: its pure decisions (``pdb_status``, ``pods_to_finish``) and its own calls (``_finish``,
``_put_status``) are reused as they are; only ``step`` differs. The tier's step LISTs every pod
in the cluster twice per turn, which at 15,000 pods would be most of what the API server does; a
real kubelet and disruption controller work from informers instead, and so does this one: one watch
of all pods keeps a cache (it is also the bench's observer: the moment each node's last pod is gone
is its "empty" time, the same for every drainer), and each turn only finishes what is terminating
and recomputes the PDBs of namespaces whose pods changed. The kubelets (``Kubelets``) are one per
node, as in a hall: each finishes its own node's terminating pods as its node identity, beside every
other node's and apart from the disruption controller's turn.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self

import ujson

from bench.worker_life import exit_with_parent
from common.http import HttpClient, HttpError, TlsFiles
from executor.kube import pacing
from executor.kube.watch_stream import WatchStream
from tests.rigs.kube_real_objects import FakeControlPlane, KubeClient, pdb_status, pods_to_finish
from tests.rigs.kube_real_rig import RealApiServer

Obj = dict[str, Any]
DISRUPTION_WORKERS = 8
KUBELET_RETRY_S = 1.0      # after an answer that is not the pod's end (APF's 429, no answer, a 5xx)
WATCH_TIMEOUT_S = 600


class Turns:
    """A count and a sum of turn-around times in seconds (thread-safe enough: added under a lock)."""

    def __init__(self) -> None:
        self.n = 0
        self.total_s = 0.0

    def add(self, seconds: float) -> None:
        self.n += 1
        self.total_s += seconds


class PodCache:
    """Every pod in the cluster, from one list + watch (thread-safe), and when each node went empty."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: dict[str, Obj] = {}        # uid -> pod
        self.per_node: dict[str, int] = {}
        self.dirty: set[str] = set()           # namespaces whose pods changed since the last turn
        self.empty_at: dict[str, float] = {}   # node -> when its last pod went (watched nodes only)
        self.gone_at: list[float] = []         # when each pod of a watched node went
        self.watched: set[str] = set()
        self.changed = threading.Event()
        # What the control plane's turn needs, kept as the events come (an informer's indexes),
        # not found by scanning every pod in the cluster ten times a second.
        self.terminating: dict[str, Obj] = {}           # uid -> pod with a deletionTimestamp
        self.by_ns: dict[str, dict[str, Obj]] = {}      # namespace -> uid -> pod
        # The control plane's turn-arounds, for the model (bench/fleet_model.py ``kubelet_s`` and
        # ``controller_s``): when each terminating pod was first seen, and per namespace the oldest pod
        # gone that no PDB status written since reflects.
        self.terminating_since: dict[str, float] = {}   # uid -> monotonic time its deletionTimestamp was seen
        self.gone_since: dict[str, float] = {}          # namespace -> monotonic time
        self.kubelet_turns = Turns()

    def reset(self, items: list[Obj]) -> None:
        with self.lock:
            self.pods.clear()
            self.per_node.clear()
            self.terminating.clear()
            self.by_ns.clear()
            for pod in items:
                self._put(pod)

    def _put(self, pod: Obj) -> None:
        md = pod["metadata"]
        uid = md["uid"]
        if uid not in self.pods:
            node = (pod.get("spec") or {}).get("nodeName") or ""
            self.per_node[node] = self.per_node.get(node, 0) + 1
        self.pods[uid] = pod
        self.by_ns.setdefault(md["namespace"], {})[uid] = pod
        if md.get("deletionTimestamp"):
            self.terminating[uid] = pod
            self.terminating_since.setdefault(uid, time.monotonic())
        self.dirty.add(md["namespace"])

    def apply(self, event: Obj, now: float) -> None:
        pod = event["object"]
        with self.lock:
            if event["type"] in ("ADDED", "MODIFIED"):
                self._put(pod)
            elif event["type"] == "DELETED" and self.pods.pop(pod["metadata"]["uid"], None) is not None:
                self.terminating.pop(pod["metadata"]["uid"], None)
                seen = self.terminating_since.pop(pod["metadata"]["uid"], None)
                mono = time.monotonic()
                if seen is not None:
                    self.kubelet_turns.add(mono - seen)
                self.gone_since.setdefault(pod["metadata"]["namespace"], mono)
                self.by_ns.get(pod["metadata"]["namespace"], {}).pop(pod["metadata"]["uid"], None)
                node = (pod.get("spec") or {}).get("nodeName") or ""
                left = self.per_node[node] = self.per_node.get(node, 1) - 1
                if node in self.watched:
                    self.gone_at.append(now)
                self.dirty.add(pod["metadata"]["namespace"])
                if left == 0 and node in self.watched and node not in self.empty_at:
                    self.empty_at[node] = now
        self.changed.set()

    def watch_nodes(self, nodes: Iterable[str]) -> None:
        with self.lock:
            self.watched = set(nodes)
            self.empty_at = {}
            self.gone_at = []

    def count(self, node: str) -> int:
        with self.lock:
            return self.per_node.get(node, 0)

    def terminating_pods(self) -> list[Obj]:
        with self.lock:
            return list(self.terminating.values())

    def take_dirty(self) -> set[str]:
        """The namespaces whose pods changed since the last take."""
        with self.lock:
            dirty, self.dirty = self.dirty, set()
            return dirty

    def take_gone_since(self, namespaces: Iterable[str]) -> dict[str, float]:
        """For each of ``namespaces`` that lost a pod since its PDBs were last written, since when."""
        with self.lock:
            return {ns: t for ns in namespaces if (t := self.gone_since.pop(ns, None)) is not None}

    def in_namespaces(self, namespaces: Iterable[str]) -> dict[str, list[Obj]]:
        with self.lock:
            return {ns: list(self.by_ns.get(ns, {}).values()) for ns in namespaces}


class PdbCache:
    """Every PodDisruptionBudget, from a list + watch, and the namespaces whose PDBs changed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_ns: dict[str, dict[str, Obj]] = {}
        self.dirty: set[str] = set()

    def reset(self, items: list[Obj]) -> None:
        with self.lock:
            self.by_ns.clear()
            for pdb in items:
                self._put(pdb)

    def _put(self, pdb: Obj) -> None:
        ns = pdb["metadata"]["namespace"]
        self.by_ns.setdefault(ns, {})[pdb["metadata"]["name"]] = pdb
        self.dirty.add(ns)

    def apply(self, event: Obj, now: float) -> None:
        with self.lock:
            if event["type"] in ("ADDED", "MODIFIED"):
                self._put(event["object"])
            elif event["type"] == "DELETED":
                md = event["object"]["metadata"]
                self.by_ns.get(md["namespace"], {}).pop(md["name"], None)

    def take(self, also: set[str]) -> dict[str, list[Obj]]:
        """The PDBs of the namespaces that changed (``also``: where their pods changed)."""
        with self.lock:
            namespaces, self.dirty = self.dirty | also, set()
            return {ns: list(self.by_ns.get(ns, {}).values()) for ns in namespaces if self.by_ns.get(ns)}


class PodInformer:
    """One list + watch of every pod (or of ``resource``), applied to its cache (a thread; ``stop``
    ends the watch)."""

    def __init__(self, server: RealApiServer, cache: PodCache | PdbCache, resource: str = "/api/v1/pods") -> None:
        self.server, self.cache, self.resource = server, cache, resource
        self._stopping = threading.Event()
        self._stream: WatchStream | None = None
        self.thread = threading.Thread(target=self._watch, name="pod-informer", daemon=True)

    def start(self) -> PodInformer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._stream is not None:
            self._stream.close()
        self.thread.join(10)

    def _watch(self) -> None:
        assert self.server.admin is not None
        http = HttpClient(self.server.url, timeout_s=120.0, max_body=1 << 30,
                          tls=TlsFiles(ca_file=str(self.server.ca_file)))
        headers = {"Authorization": f"Bearer {self.server.admin.token}", "Accept": "application/json"}
        rv = ""
        while not self._stopping.is_set():
            if not rv:
                resp = http.request("GET", f"{self.resource}?resourceVersion=0", headers=headers)
                doc = ujson.loads(resp.body)
                self.cache.reset(doc["items"])
                rv = doc["metadata"]["resourceVersion"]
            stream = self._stream = WatchStream(
                http, f"{self.resource}?watch=1&resourceVersion={rv}&timeoutSeconds={WATCH_TIMEOUT_S}",
                headers, read_timeout_s=WATCH_TIMEOUT_S + 30)
            try:
                stream.open()
                for event in stream.events():
                    if event["type"] == "ERROR":
                        rv = ""
                        break
                    self.cache.apply(event, time.time())
                    rv = event["object"]["metadata"].get("resourceVersion") or rv
            except OSError:
                self._stopping.wait(0.5)
            finally:
                stream.close()


class _Answer:
    """What ``FakeControlPlane._finish`` / ``_put_status`` read of an answer (as of requests')."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.status_code, self.ok, self._body = status, 200 <= status < 400, body
        self.headers = headers or {}

    @property
    def text(self) -> str:
        return self._body.decode("utf-8", "replace")


class LightClient:
    """``KubeClient.request`` over the stdlib client (``common.http``: http.client, keep-alive) and
    ujson: the kubelets' DELETEs and the controller's status PUTs cost the harness a fraction of
    what ``requests`` does (real ones speak client-go, cheaper still). As the admin, or as ``token``'s
    identity (a kubelet's node). Not thread-safe."""

    def __init__(self, server: RealApiServer, token: str | None = None) -> None:
        assert server.admin is not None
        self._http = HttpClient(server.url, timeout_s=30.0, max_body=16 << 20,
                                tls=TlsFiles(ca_file=str(server.ca_file)))
        self._headers = {"Authorization": f"Bearer {token or server.admin.token}", "Accept": "application/json"}

    def request(self, method: str, path: str, body: Obj | None = None, **_: Any) -> _Answer:
        headers, data = dict(self._headers), None
        if body is not None:
            data, headers["Content-Type"] = ujson.dumps(body).encode(), "application/json"
        try:
            resp = self._http.request(method, path, headers=headers, body=data)
        except HttpError as e:
            return _Answer(0, str(e).encode())
        return _Answer(resp.status, resp.body, resp.headers)


class Kubelets:
    """The hall's kubelets, one per node (``submit`` a terminating pod to its node's): each finishes its
    own node's pods one at a time -- a DELETE with grace 0 and the pod's uid as precondition, what a
    kubelet's status manager sends once the containers have stopped (pkg/kubelet/status
    ``status_manager.go``, ``syncPod`` and ``canBeDeleted``) -- as its node identity
    ``system:node:<name>``. The built-in system-nodes FlowSchema puts that in the ``system`` priority
    level beside the Leases (deploy/kubernetes's FlowSchema takes no pod DELETE of a node), so under
    load it queues there and may be refused (429) as a real kubelet's is; an answer that is not the
    pod's end is tried again ``KUBELET_RETRY_S`` later (the Retry-After if longer), as the status
    manager's resync does. Every node's kubelet runs beside the others', and none waits for the
    disruption controller's writes (they are separate components). Until round 11, 32 threads as the
    admin (exempt from APF) finished every node's pods, and only between the disruption controller's
    turns: at 440 nodes a pod waited 17 s on average to be deleted, a limit of the harness and not of a
    hall. Left out: the kubelet's client rate limit (``kubeAPIQPS`` 5, burst 10) and its status PATCH
    before the DELETE."""

    def __init__(self, server: RealApiServer, on_request: Callable[[], None],
                 errors: list[str], stopping: threading.Event) -> None:
        self.server = server
        self._on_request, self._errors, self._stopping = on_request, errors, stopping
        self._lock = threading.Lock()
        self._queued: dict[str, deque[Obj]] = {}    # node -> its pods its kubelet has still to finish
        self._busy: set[str] = set()                # nodes whose kubelet is at work
        self._seen: set[str] = set()                # uids ever submitted
        self._clients: dict[str, LightClient] = {}  # node -> its kubelet's client (used by one thread at a time)
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(server.nodes)), thread_name_prefix="kubelet")

    def submit(self, pods: Iterable[Obj]) -> None:
        start = []
        with self._lock:
            for pod in pods:
                uid = pod["metadata"]["uid"]
                if uid in self._seen:
                    continue
                self._seen.add(uid)
                node = (pod.get("spec") or {}).get("nodeName") or ""
                self._queued.setdefault(node, deque()).append(pod)
                if node not in self._busy:
                    self._busy.add(node)
                    start.append(node)
        for node in start:
            self._pool.submit(self._run, node)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, node: str) -> None:
        while not self._stopping.is_set():
            with self._lock:
                queue = self._queued.get(node)
                if not queue:
                    self._busy.discard(node)
                    return
                pod = queue.popleft()
            try:
                self._finish(node, pod)
            except Exception as exc:  # noqa: BLE001 -- said in the errors the bench reports; the node's next pods go on
                self._errors.append(f"kubelet {node}: {exc!r}")

    def _client(self, node: str) -> LightClient:
        client = self._clients.get(node)
        if client is None:
            ident = self.server.nodes.get(node)
            client = self._clients[node] = LightClient(self.server, ident.token if ident else None)
        return client

    def _finish(self, node: str, pod: Obj) -> None:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]}}
        while not self._stopping.is_set():
            self._on_request()
            resp = self._client(node).request("DELETE", path, body)
            if resp.ok or resp.status_code in (404, 409):    # gone already / replaced by a new pod of that name
                return
            if resp.status_code in {429, 0} or resp.status_code >= 500:
                self._stopping.wait(max(KUBELET_RETRY_S, retry_after_s(resp.headers)))
                continue
            self._errors.append(f"kubelet {node} finish {meta['name']}: {resp.status_code} {resp.text[:200]}")
            return


def retry_after_s(headers: dict[str, str]) -> float:
    """The Retry-After of an answer in seconds, as the agent reads it (``pacing.retry_after_s``); 0 when
    absent or not a number of seconds."""
    return pacing.retry_after_s(headers.get("retry-after")) or 0.0


class FleetControlPlane(FakeControlPlane):
    """The tier's fake kubelet + disruption controller, informer-style (see the module doc)."""

    def __init__(self, server: RealApiServer, interval_s: float = 0.1) -> None:
        super().__init__(server.client, interval_s=interval_s)
        self.server = server
        self.cache = PodCache()
        self.requests = 0      # what the control plane itself sent (subtracted from the server's count)
        self._kubelets_stop = threading.Event()
        self.kubelets = Kubelets(server, self._count_request, self.errors, self._kubelets_stop)
        self._kubelet_thread = threading.Thread(target=self._kubelet_loop, name="kubelets", daemon=True)
        self._disruption_pool = ThreadPoolExecutor(max_workers=DISRUPTION_WORKERS, thread_name_prefix="disruption")
        self._local = threading.local()
        self.pdbs = PdbCache()
        self.controller_turns = Turns()
        self._informers = (PodInformer(server, self.cache),
                           PodInformer(server, self.pdbs, "/apis/policy/v1beta1/poddisruptionbudgets"))

    def start(self) -> FleetControlPlane:
        for informer in self._informers:
            informer.start()
        self._kubelet_thread.start()
        super().start()
        return self

    def stop(self) -> None:
        for informer in self._informers:
            informer.stop()
        self._kubelets_stop.set()
        self.cache.changed.set()
        self._kubelet_thread.join(10)
        super().stop()
        self.kubelets.shutdown()
        self._disruption_pool.shutdown(wait=True, cancel_futures=True)

    def _count_request(self) -> None:
        with self.cache.lock:
            self.requests += 1

    def _kubelet_loop(self) -> None:
        """Each terminating pod to its node's kubelet as soon as the pod watch shows it."""
        while not self._kubelets_stop.is_set():
            self.cache.changed.wait(self._interval)
            self.cache.changed.clear()
            try:
                self.kubelets.submit(pods_to_finish(self.cache.terminating_pods()))
            except Exception as exc:  # noqa: BLE001 -- said in the errors the bench reports, not a silent end
                self.errors.append(f"kubelets: {exc!r}")
            self._kubelets_stop.wait(0.01)     # a burst of watch events is one pass, not one each

    # -- the disruption controller's turn --------------------------------------------------------
    def step(self, client: KubeClient) -> None:
        todo = self.pdbs.take(self.cache.take_dirty())
        if not todo:
            return
        by_ns = self.cache.in_namespaces(todo)
        # From the informers' caches, as the real controller does; a PUT on a stale PDB gets 409,
        # and the watch brings the new version, which dirties the namespace again.
        puts = [(pdb, status) for ns, pdbs in todo.items() for pdb in pdbs
                if (status := pdb_status(pdb, by_ns.get(ns, []))) != pdb.get("status")]
        gone_since = self.cache.take_gone_since({pdb["metadata"]["namespace"] for pdb, _ in puts})
        for future in [self._disruption_pool.submit(self._put_one, pdb, status) for pdb, status in puts]:
            future.result()
        done = time.monotonic()
        with self.cache.lock:
            for since in gone_since.values():
                self.controller_turns.add(done - since)

    def _client(self) -> KubeClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = LightClient(self.server)
        return client

    def _put_one(self, pdb: Obj, status: Obj) -> None:
        self._count_request()
        self._put_status(self._client(), pdb, status)


def mean_turns(before: tuple[float, float, float, float],
               after: tuple[float, float, float, float]) -> dict[str, float | None]:
    """The control plane's mean turn-arounds between two ``ControlPlaneProcess.turns`` readings."""
    kn, ks, cn, cs = (b - a for a, b in zip(before, after, strict=True))
    return {"kubelet_s": round(ks / kn, 3) if kn else None, "controller_s": round(cs / cn, 3) if cn else None}


def parallel(fn: Callable[[KubeClient, Any], object], items: Iterable[Any], workers: int,
             make_client: Callable[[], KubeClient]) -> None:
    """``fn(client, item)`` for every item on ``workers`` threads, one client per thread."""
    local = threading.local()

    def run(item: Any) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = make_client()
        fn(client, item)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(run, item) for item in items]:
            future.result()


class ControlPlaneProcess:
    """The FleetControlPlane in a forked process of its own, as a real control plane is: the agents
    in this process must not slow the kubelets and the disruption controller down (one GIL)."""

    def __init__(self, server: RealApiServer) -> None:
        ctx = multiprocessing.get_context("fork")
        self._stop = ctx.Event()
        self._requests = ctx.Value("q", 0)
        self._errors = ctx.Value("q", 0)
        # (kubelet n, kubelet s, controller n, controller s): the turn-arounds so far (``turns``).
        self._turns = ctx.Array("d", 4)
        self._proc = ctx.Process(target=self._run, args=(server,), name="fleet-control-plane", daemon=True)

    @property
    def requests(self) -> int:
        return int(self._requests.value)

    @property
    def pid(self) -> int:
        return int(self._proc.pid or 0)

    @property
    def errors(self) -> int:
        return int(self._errors.value)

    def turns(self) -> tuple[float, float, float, float]:
        """(kubelet turns, their seconds, controller turns, their seconds) since the start: the
        kubelet's from a pod's deletionTimestamp seen to its DELETED seen, the disruption
        controller's from a pod gone to its PDBs' status written. ``mean_turns`` of two readings
        gives a scenario's."""
        a = self._turns
        return a[0], a[1], a[2], a[3]

    def _run(self, server: RealApiServer) -> None:
        # A real control plane has machines of its own; on this one it must not queue behind the
        # drainers' hundreds of threads (or the bench measures the kubelets' starvation).
        os.nice(-10)
        exit_with_parent()
        plane = FleetControlPlane(server).start()
        try:
            while not self._stop.wait(0.2):
                self._requests.value = plane.requests
                self._errors.value = len(plane.errors)
                k, c = plane.cache.kubelet_turns, plane.controller_turns
                self._turns[:] = [k.n, k.total_s, c.n, c.total_s]
        finally:
            plane.stop()

    def __enter__(self) -> Self:
        self._proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()
