"""Objects and stand-in controllers for a controller-less kube-apiserver 1.20 (test-side only).

The real server runs no kubelet, scheduler, disruption or service-account controllers, so a test
has to do their share by hand (see shared/research/kubernetes-api.md, "Limits of 1.20"):

- every namespace needs its `default` ServiceAccount before a pod can be created;
- pods are created already bound (`spec.nodeName`) and their status PUT to Running + Ready,
  since Pending pods bypass PDBs on eviction;
- a PDB's status must be written (observedGeneration, disruptionsAllowed, ...) or every covered
  eviction gets 429 "still being processed";
- graceful deletions of bound pods stay Terminating until someone DELETEs them with
  gracePeriodSeconds 0 and a UID precondition -- the kubelet's job.

FakeControlPlane does the last two in a background thread; its decisions (`pdb_status`,
`pods_to_finish`) are pure functions over plain API objects.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import requests

Obj = dict[str, Any]


class KubeClient:
    """A small bearer-token HTTP client. Not thread-safe: make one per thread."""

    def __init__(self, url: str, token: str, ca_file: Path) -> None:
        self.url = url
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {token}"
        # Passed per request: a session-level `verify` loses to REQUESTS_CA_BUNDLE in the environment.
        self._verify = str(ca_file)

    def request(self, method: str, path: str, body: Obj | None = None, *,
                params: dict[str, str] | None = None,
                content_type: str = "application/json") -> requests.Response:
        headers = {"Content-Type": content_type} if body is not None else {}
        return self._session.request(method, self.url + path, json=body, params=params,
                                     headers=headers, verify=self._verify, timeout=30)

    def must(self, method: str, path: str, body: Obj | None = None, **kw: Any) -> Obj:
        """Like request(), but any non-2xx answer raises with the server's Status message."""
        resp = self.request(method, path, body, **kw)
        if not resp.ok:
            raise RuntimeError(f"{method} {path} -> {resp.status_code}: {resp.text[:500]}")
        return resp.json()

    def close(self) -> None:
        self._session.close()


def _create(client: KubeClient, path: str, obj: Obj) -> Obj:
    """POST, treating 409 AlreadyExists as success (helpers are idempotent)."""
    resp = client.request("POST", path, obj)
    if resp.status_code == 409:
        return client.must("GET", f"{path}/{obj['metadata']['name']}")
    if not resp.ok:
        raise RuntimeError(f"POST {path} -> {resp.status_code}: {resp.text[:500]}")
    return resp.json()


def ensure_namespace(client: KubeClient, ns: str) -> None:
    """The namespace plus its `default` ServiceAccount (no SA controller here).

    automountServiceAccountToken is off: 1.20's ServiceAccount admission would otherwise demand a
    token Secret, which only the (absent) token controller creates.
    """
    _create(client, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    _create(client, f"/api/v1/namespaces/{ns}/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"},
        "automountServiceAccountToken": False,
    })


def create_node(client: KubeClient, name: str, labels: dict[str, str] | None = None) -> Obj:
    """A Ready node. The server itself adds the not-ready:NoSchedule taint (TaintNodesByCondition)."""
    node = _create(client, "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
    })
    node["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
    return client.must("PUT", f"/api/v1/nodes/{name}/status", node)


def create_running_pod(client: KubeClient, ns: str, name: str, node: str, *,
                       labels: dict[str, str] | None = None, empty_dir: bool = False,
                       owner: Obj | None = None) -> Obj:
    """A pod bound to `node` whose status says Running and Ready, as a kubelet would report."""
    spec: Obj = {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}],
                 "terminationGracePeriodSeconds": 30}
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    meta: Obj = {"name": name, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    pod = _create(client, f"/api/v1/namespaces/{ns}/pods",
                  {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}],
    }
    return client.must("PUT", f"/api/v1/namespaces/{ns}/pods/{name}/status", pod)


def create_pdb(client: KubeClient, ns: str, name: str, match_labels: dict[str, str], *,
               min_available: int | str | None = None, max_unavailable: int | str | None = None) -> Obj:
    """A policy/v1beta1 PDB (the only version 1.20 serves). Its status is still empty: call
    write_pdb_status() or let FakeControlPlane compute it."""
    spec: Obj = {"selector": {"matchLabels": match_labels}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return _create(client, f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name}, "spec": spec,
    })


def write_pdb_status(client: KubeClient, pdb: Obj, status: Obj) -> Obj:
    """PUT `status` (merged over observedGeneration = generation) on the PDB, as the disruption
    controller would. Raises on 409: the caller passes the object it just read."""
    ns, name = pdb["metadata"]["namespace"], pdb["metadata"]["name"]
    body = dict(pdb, status={"observedGeneration": pdb["metadata"].get("generation", 1), **status})
    return client.must("PUT", f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets/{name}/status", body)


# -- pure decisions -------------------------------------------------------------------------------
def _selected(pod: Obj, match_labels: dict[str, str]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    # An empty selector matches nothing in policy/v1beta1, as the eviction code does.
    return bool(match_labels) and all(labels.get(k) == v for k, v in match_labels.items())


def _healthy(pod: Obj) -> bool:
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return status.get("phase") == "Running" and ready and not pod["metadata"].get("deletionTimestamp")


def _resolve(value: int | str, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        # Kubernetes rounds percentages up for minAvailable and maxUnavailable alike.
        return -(-int(value[:-1]) * total // 100)
    return int(value)


def pdb_status(pdb: Obj, pods: Iterable[Obj]) -> Obj:
    """What the disruption controller would write for `pdb`, given the pods of its namespace.

    Without workload controllers, expectedPods is simply the number of matching pods. Pods the
    server recorded in disruptedPods (evicted, deletion not yet seen) count as unhealthy.
    """
    spec, old = pdb.get("spec") or {}, pdb.get("status") or {}
    match = (spec.get("selector") or {}).get("matchLabels") or {}
    selected = {p["metadata"]["name"]: p for p in pods if _selected(p, match)}
    disrupted = {name: ts for name, ts in (old.get("disruptedPods") or {}).items()
                 if name in selected and not selected[name]["metadata"].get("deletionTimestamp")}
    healthy = sum(1 for name, p in selected.items() if _healthy(p) and name not in disrupted)
    expected = len(selected)
    if "maxUnavailable" in spec:
        desired = max(0, expected - _resolve(spec["maxUnavailable"], expected))
    else:
        desired = _resolve(spec.get("minAvailable", 1), expected)
    status: Obj = {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
        "disruptionsAllowed": max(0, healthy - desired),
    }
    if disrupted:
        status["disruptedPods"] = disrupted
    return status


def pods_to_finish(pods: Iterable[Obj], nodes: frozenset[str] | None = None) -> list[Obj]:
    """Terminating pods (deletionTimestamp set) that a kubelet on `nodes` (None: any) would remove."""
    return [p for p in pods if p["metadata"].get("deletionTimestamp")
            and (nodes is None or (p.get("spec") or {}).get("nodeName") in nodes)]


# -- the imperative shell ---------------------------------------------------------------------------
class FakeControlPlane:
    """A fake kubelet + disruption controller: step() once, or start()/stop() a polling thread.

    `client_factory` makes the thread's own KubeClient (e.g. RealApiServer.client). `nodes`
    limits the kubelet to those nodes (None: every node); `kubelet=False` or `disruption=False`
    switch off either half.
    """

    def __init__(self, client_factory: Callable[[], KubeClient], *, nodes: Iterable[str] | None = None,
                 kubelet: bool = True, disruption: bool = True, interval_s: float = 0.2) -> None:
        self._factory = client_factory
        self._nodes = frozenset(nodes) if nodes is not None else None
        self._kubelet, self._disruption = kubelet, disruption
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []  # unexpected answers, for a test to assert on
        self.finished: list[str] = []  # "ns/name" of pods the kubelet removed

    def step(self, client: KubeClient) -> None:
        pods = client.must("GET", "/api/v1/pods")["items"]
        if self._kubelet:
            for pod in pods_to_finish(pods, self._nodes):
                self._finish(client, pod)
            pods = client.must("GET", "/api/v1/pods")["items"]
        if self._disruption:
            pdbs = client.must("GET", "/apis/policy/v1beta1/poddisruptionbudgets")["items"]
            for pdb in pdbs:
                ns = pdb["metadata"]["namespace"]
                status = pdb_status(pdb, (p for p in pods if p["metadata"]["namespace"] == ns))
                if status != pdb.get("status"):
                    self._put_status(client, pdb, status)

    def _finish(self, client: KubeClient, pod: Obj) -> None:
        meta = pod["metadata"]
        resp = client.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", {
            "kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        })
        if resp.ok:
            self.finished.append(f"{meta['namespace']}/{meta['name']}")
        elif resp.status_code not in (404, 409):  # gone already / replaced by a new pod of that name
            self.errors.append(f"finish {meta['name']}: {resp.status_code} {resp.text[:200]}")

    def _put_status(self, client: KubeClient, pdb: Obj, status: Obj) -> None:
        meta = pdb["metadata"]
        resp = client.request(
            "PUT", f"/apis/policy/v1beta1/namespaces/{meta['namespace']}/poddisruptionbudgets/{meta['name']}/status",
            dict(pdb, status=status))
        # 409: an eviction updated the status meanwhile; the next step recomputes from fresh data.
        if not resp.ok and resp.status_code != 409:
            self.errors.append(f"pdb {meta['name']}: {resp.status_code} {resp.text[:200]}")

    def _run(self) -> None:
        client = self._factory()
        try:
            while not self._stop.is_set():
                try:
                    self.step(client)
                except (requests.RequestException, RuntimeError) as exc:
                    self.errors.append(repr(exc))
                self._stop.wait(self._interval)
        finally:
            client.close()

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name="fake-control-plane", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
