"""Every fake kubelet's node Lease, renewed every 10 s as a real kubelet does (bench/fleet.py).

A real kubelet (pkg/kubelet/nodelease, ``controller.go``; the Leases concept page of
kubernetes/website: "every kubelet heart beat is an UPDATE request to this Lease object,
updating the spec.renewTime field") keeps a Lease named after its node in ``kube-node-lease``
(coordination.k8s.io/v1), ``leaseDurationSeconds`` 40 and a renew interval of a quarter of it,
10 s; it creates the Lease if missing, renews by UPDATE (PUT) of the Lease it last read, and on
a failed update retries (``maxUpdateRetries`` 5) after reading it again. It does so as its node
identity ``system:node:<name>``, so the built-in ``system-nodes`` FlowSchema puts it in the
``system`` priority level -- deploy/kubernetes's FlowSchema must leave that traffic whole while
the agents drain.

``LeaseRenewers`` runs the renewals of a set of nodes in a spawned process of its own at nice -10
(the kubelets are on their nodes, not in the agents' interpreter or behind their CPU): a thread
and a connection per node, as every kubelet has its own, each node first due at its own random
phase, then 10 s (+0-4 %) after its last renewal ended. It records every attempt: when it was sent (wall clock, to place it in the drain
window), its latency and status, and how late it went out. Until round 12, 48 threads shared the
nodes, and at 1,000 nodes a slow answer held up the ~20 renewals queued behind it in its thread (the
p99 lateness reached 47 s, and a renewal that late is a node NotReady for the bench's own reason);
with a thread a node, lateness is only a node's own previous renewal and the process's CPU.
``summary`` (pure) turns the attempts into the bench's figures.
"""
from __future__ import annotations

import datetime
import itertools
import multiprocessing
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import ujson

from bench.worker_life import exit_with_parent
from common.http import HttpClient, HttpError, TlsFiles

RENEW_S = 10.0
JITTER = 0.04
LEASE_S = 40
RETRIES = 5
STACK_BYTES = 512 << 10   # a renewer needs little stack; 1,000 of them at the default 8 MiB is 8 GiB of address space
PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


@dataclass(frozen=True)
class Attempt:
    node: str
    sent_at: float        # wall clock
    latency_s: float
    status: int           # 0: no answer
    late_s: float         # how long after it was due it went out


def _now_micro() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _renew(http: HttpClient, node: str, token: str, cache: dict[str, Any], due: float,
           out: list[Attempt]) -> None:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json", "Content-Type": "application/json"}
    for _ in range(RETRIES):
        lease = cache.get(node)
        sent, sent_wall = time.monotonic(), time.time()
        try:
            if lease is None:
                resp = http.request("GET", f"{PATH}/{node}", headers=headers)
                if resp.status == 404:
                    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                            "metadata": {"name": node, "namespace": "kube-node-lease"},
                            "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_S,
                                     "renewTime": _now_micro()}}
                    resp = http.request("POST", PATH, headers=headers, body=ujson.dumps(body).encode())
                if resp.status in (200, 201):
                    cache[node] = ujson.loads(resp.body)
                    if lease is None and resp.status == 201:
                        out.append(Attempt(node, sent_wall, time.monotonic() - sent, resp.status, 0.0))
                        return
                    continue
                out.append(Attempt(node, sent_wall, time.monotonic() - sent, resp.status, 0.0))
                continue
            lease["spec"]["renewTime"] = _now_micro()
            resp = http.request("PUT", f"{PATH}/{node}", headers=headers, body=ujson.dumps(lease).encode())
            status = resp.status
            if status == 200:
                cache[node] = ujson.loads(resp.body)
            else:
                cache.pop(node, None)      # read it again (409: someone else's version)
        except HttpError:
            status = 0
            cache.pop(node, None)
        out.append(Attempt(node, sent_wall, time.monotonic() - sent, status, max(0.0, sent - due)))
        if status == 200:
            return


def start_renewers(url: str, ca_file: str, tokens: dict[str, str], halt: threading.Event,
                   seed: int = 7) -> tuple[list[threading.Thread], dict[str, list[Attempt]]]:
    """A renewer thread per node of ``tokens``, started, each due first at a random phase of 10 s;
    they run until ``halt`` is set. Returns the threads and every node's attempts (filled as they go)."""
    rng = random.Random(seed)
    start = time.monotonic()
    attempts: dict[str, list[Attempt]] = {n: [] for n in tokens}

    def run(node: str, due: float, jitter: random.Random) -> None:
        """One kubelet's heartbeat, its own connection: the next renewal is 10 s (+0-4 %) after the
        last one ended, as the kubelet's ``wait.JitterUntil(c.sync, c.renewInterval, 0.04, true, ...)``
        (pkg/kubelet/nodelease/controller.go, sliding) -- a slow answer delays this node's next
        renewal, no other node's."""
        http = HttpClient(url, timeout_s=RENEW_S, max_body=1 << 20, tls=TlsFiles(ca_file=ca_file))
        cache: dict[str, Any] = {}
        while not halt.wait(max(0.0, due - time.monotonic())):
            _renew(http, node, tokens[node], cache, due, attempts[node])
            due = time.monotonic() + RENEW_S * (1 + JITTER * jitter.random())
        http.close()
    threads = [threading.Thread(target=run, args=(n, start + rng.uniform(0, RENEW_S), random.Random(rng.random())),
                                daemon=True, name=f"lease-{n}") for n in sorted(tokens)]
    # The stack size is the process's, for every thread started after it is set: only these get the
    # small one. (Left set, it reached a later thread of the test process parsing JSON nested
    # 60,000 deep, and CPython 3.13 overflowed that stack: a segfault, not a RecursionError.)
    before = threading.stack_size(STACK_BYTES)
    try:
        for t in threads:
            t.start()
    finally:
        threading.stack_size(before)
    return threads, attempts


def _worker(url: str, ca_file: str, tokens: dict[str, str], ready: Any, stop: Any, results: Any) -> None:
    exit_with_parent()
    # A kubelet has a node of its own: the renewals must measure the server's answer, not the
    # scheduling delay of the bench's client core that hundreds of agents saturate (so the fake
    # control plane: fleet_cluster.ControlPlaneProcess). Set before the threads start: they inherit it.
    os.nice(-10)
    halt = threading.Event()
    threads, attempts = start_renewers(url, ca_file, tokens, halt)
    ready.release()
    stop.wait()
    halt.set()
    for t in threads:
        t.join(RENEW_S + 5)
    results.put([(a.node, a.sent_at, a.latency_s, a.status, a.late_s) for lst in attempts.values() for a in lst])


class LeaseRenewers:
    """``start()`` the renewals of ``tokens``' nodes (node -> its identity's token); ``stop()``
    returns every attempt."""

    def __init__(self, url: str, ca_file: str, tokens: dict[str, str]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._ready, self._stop, self._results = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
        self._proc = ctx.Process(target=_worker, name="fleet-kubelet-leases", daemon=True,
                                 args=(url, ca_file, tokens, self._ready, self._stop, self._results))

    @property
    def pid(self) -> int:
        return int(self._proc.pid or 0)

    def start(self) -> LeaseRenewers:
        self._proc.start()
        if not self._ready.acquire(timeout=120):
            raise RuntimeError("the lease renewers did not start")
        return self

    def stop(self) -> list[Attempt]:
        self._stop.set()
        got = self._results.get(timeout=60)
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
        return [Attempt(*a) for a in got]


def summary(attempts: list[Attempt], start: float, end: float) -> dict[str, Any]:
    """The renewals sent in [start, end] (wall clock): count, p50/p99/max latency (ms), failures
    (an attempt with no 200/201), p99 lateness, and the longest gap between a node's successes
    over the whole record (a gap past ``LEASE_S`` would make the node NotReady)."""
    inside = [a for a in attempts if start <= a.sent_at <= end]
    lat = sorted(a.latency_s for a in inside)
    late = sorted(a.late_s for a in inside)

    def pct(xs: list[float], q: float) -> float | None:
        return round(1000 * xs[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else None
    ok: dict[str, list[float]] = {}
    for a in sorted(attempts, key=lambda a: a.sent_at):
        if a.status in (200, 201):
            ok.setdefault(a.node, []).append(a.sent_at)
    gaps = [b - a for times in ok.values() for a, b in itertools.pairwise(times) if start <= b <= end]
    return {"renewals": len(inside), "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
            "max_ms": pct(lat, 1.0), "failures": sum(1 for a in inside if a.status not in (200, 201)),
            "late_p99_ms": pct(late, 0.99), "max_gap_s": round(max(gaps), 1) if gaps else None}
