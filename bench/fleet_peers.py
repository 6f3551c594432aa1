"""The peers of bench/fleet.py: how a hall reclaim is drained without an agent on every node.

- ``CentralDrainer``: one controller for the whole hall, as aws-node-termination-handler's queue
  mode runs -- a queue of nodes, 10 workers, each cordoning and draining one node at a time the
  way the kubectl drain library does (cordon, list the node's pods, evict each, a PDB's 429
  retried after 5 s, then poll every pod every second until it is gone), every request through
  one client-go token bucket at its defaults (5 QPS, burst 10: ``flowcontrol.NewTokenBucketRateLimiter``),
  or raised (bench/fleet.py's ``central50``: 50 QPS, burst 100, what an operator would set).
- ``kubectl_drains``: the real ``kubectl drain`` for every node, all started at once.
"""
from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ujson

from common.http import HttpClient, HttpError
from tests.support.procutil import venv_tool

QPS, BURST, WORKERS = 5.0, 10, 10
PDB_RETRY_S = 5.0          # kubectl drain's fixed wait after a 429
POLL_S = 1.0               # kubectl drain's wait-for-delete poll


class TokenBucket:
    """client-go's token bucket: ``burst`` tokens, refilled at ``qps``; ``take`` blocks for one."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps, self.burst, self._clock = qps, burst, clock
        self._tokens, self._last = float(burst), clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token (possibly one not refilled yet); the seconds to wait before using it."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return max(0.0, -self._tokens / self.qps)


class CentralDrainer:
    def __init__(self, url: str, token: str, tls: Any, nodes: list[str], deadline: float,
                 qps: float = QPS, burst: int = BURST) -> None:
        """``qps``/``burst``: client-go's defaults unless the operator raised them (``--kube-api-qps``)."""
        self._url, self._tls, self._deadline = url, tls, deadline
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._bucket = TokenBucket(qps, burst)
        self._queue: queue.Queue[str] = queue.Queue()
        for node in nodes:
            self._queue.put(node)
        self._stop = threading.Event()
        self.requests = self.throttled = self.refused = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work, daemon=True) for _ in range(WORKERS)]

    def start(self) -> CentralDrainer:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _call(self, http: HttpClient, method: str, path: str, body: Any = None,
              content_type: str = "application/json") -> tuple[int, Any]:
        self._stop.wait(self._bucket.reserve())
        headers = dict(self._headers)
        data = None
        if body is not None:
            data, headers["Content-Type"] = ujson.dumps(body).encode(), content_type
        try:
            resp = http.request(method, path, headers=headers, body=data)
        except HttpError:
            return 0, None
        with self._lock:
            self.requests += 1
            self.refused += resp.status == 429
        try:
            return resp.status, ujson.loads(resp.body) if resp.body else None
        except ValueError:
            return resp.status, None

    def _work(self) -> None:
        http = HttpClient(self._url, timeout_s=30.0, max_body=64 << 20, tls=self._tls)
        while not self._stop.is_set() and time.time() < self._deadline:
            try:
                node = self._queue.get_nowait()
            except queue.Empty:
                return
            self._drain(http, node)
        http.close()

    def _drain(self, http: HttpClient, node: str) -> None:
        self._call(http, "GET", f"/api/v1/nodes/{node}")
        self._call(http, "PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}},
                   "application/strategic-merge-patch+json")
        _, doc = self._call(http, "GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}&limit=500")
        pods = {p["metadata"]["uid"]: p for p in (doc or {}).get("items") or []}
        retry_at = dict.fromkeys(pods, 0.0)     # uid -> when to send its eviction (again)
        while pods and not self._stop.is_set() and time.time() < self._deadline:
            now = time.time()
            for uid, when in list(retry_at.items()):
                if when <= now:
                    md = pods[uid]["metadata"]
                    status, _ = self._call(http, "POST", f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}/eviction",
                                           {"apiVersion": "policy/v1beta1", "kind": "Eviction",
                                            "metadata": {"name": md["name"], "namespace": md["namespace"]}})
                    if status == 429:
                        retry_at[uid] = time.time() + PDB_RETRY_S
                    else:
                        del retry_at[uid]
            for uid, pod in list(pods.items()):
                if uid in retry_at:
                    continue
                md = pod["metadata"]
                status, got = self._call(http, "GET", f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}")
                if status == 404 or (got and got["metadata"]["uid"] != uid):
                    del pods[uid]
            self._stop.wait(POLL_S)


def kubectl_drains(nodes: list[str], kubeconfig_of: Callable[[str], Path], cache_dir: Path, timeout_s: int,
                   stop_at: float, until: Callable[[], bool]) -> dict[str, int]:
    """Start ``kubectl drain`` for every node at once; each one's exit code (-9: killed at stop_at,
    or once ``until()`` says every node is empty but the process has not exited yet)."""
    kubectl = venv_tool("kubectl")
    procs = {node: subprocess.Popen(
        [kubectl, "--kubeconfig", str(kubeconfig_of(node)), "--cache-dir", str(cache_dir), "drain", node,
         "--ignore-daemonsets", "--delete-emptydir-data", "--force", f"--timeout={timeout_s}s"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for node in nodes}
    codes: dict[str, int] = {}
    while len(codes) < len(procs) and time.time() < stop_at and not until():
        for node, proc in procs.items():
            if node not in codes and proc.poll() is not None:
                codes[node] = proc.returncode
        time.sleep(0.2)
    for node, proc in procs.items():   # only the processes started here, by their own handle
        if node not in codes:
            proc.kill()
            proc.wait(10)
            codes[node] = -9
    return codes
