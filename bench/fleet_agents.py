"""The agents of bench/fleet.py: every node drained by the agent's own drain code, in worker processes.

Each node's drain is the real ``executor.kube.runner.DrainRunner`` under the node's own identity
(``system:node:<name>``, plus the sco-agent taint token, as deployed). Many agents share a process
-- what is measured is the drain code, not the process shell -- and ``AgentGroups`` can spread the
nodes over ``processes`` spawned workers (500 agents are some 3,500 threads queueing for one
GIL; a real agent has its node to itself); bench/fleet.py spreads them over several. Each worker builds its
runners, waits for the common start, and sends back what its agents counted (every answer's status, per node) and its threads' CPU by
role. The workers are spawned, not forked: the bench process has threads of its own at that point.
"""
from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import psutil

from bench.worker_life import exit_with_parent
from common.http import TlsFiles, tls_context
from common.wire import Budget, phase_ends
from executor.kube.api import KubeApi
from executor.kube.drain_spec import DrainSpec
from executor.kube.runner import DrainRunner

SPREAD_S = 1.0   # the contract's default first_write_spread_ms
KINDS_LOCK = threading.Lock()
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Hall:
    """What a worker needs to drain its nodes (picklable)."""

    url: str
    ca_file: str
    taint_token: str
    tokens: dict[str, str]   # node -> its node identity's token
    deadline_s: float


def request_kind(method: str, path: str, status: int) -> str:
    """What a request of the drain was, for the row's per-kind count: its kind, and its status
    when that was not a success (0: no answer)."""
    base, _, query = path.partition("?")
    q = dict(parse_qsl(query))
    watch = q.get("watch") in ("1", "true")
    if base.endswith("/eviction"):
        kind = "eviction"
    elif "poddisruptionbudgets" in base:
        kind = "pdbs.watch" if watch else "pdbs.get" if not base.endswith("/poddisruptionbudgets") else "pdbs.list"
    elif base == "/api/v1/pods":
        kind = ("pods.watch" if watch else "pods.list.not_older_than" if q.get("resourceVersionMatch")
                else "pods.list.cache" if q.get("resourceVersion") == "0" else "pods.list.consistent")
    elif base.startswith("/api/v1/nodes/"):
        kind = f"node.{method.lower()}" + (".status" if base.endswith("/status") else "")
    elif "/pods/" in base:
        kind = f"pod.{method.lower()}" + (".status" if base.endswith("/status") else "")
    else:
        kind = f"{method} {base}"
    return kind if 200 <= status < 300 else f"{kind} -> {status}"


def make_api(hall: Hall, node: str, statuses: list[int], cordoned: dict[str, float],
             kinds: dict[str, int] | None = None) -> Callable[[], KubeApi]:
    """The node's agent's client factory; every answer's status goes to ``statuses`` (0: none),
    and the wall time of the first accepted PATCH of the Node object (the cordon: node_steps.cordon
    sends it first, as the node identity) to ``cordoned[node]``; ``kinds`` counts them by
    ``request_kind`` (the worker's drains share it, under its lock)."""
    tls = tls_context(TlsFiles(ca_file=hall.ca_file))
    node_path = f"/api/v1/nodes/{node}"

    def count(method: str, path: str, status: int) -> None:
        statuses.append(status)   # list.append is atomic: the agent's threads share it
        if kinds is not None:
            kind = request_kind(method, path, status)
            with KINDS_LOCK:
                kinds[kind] = kinds.get(kind, 0) + 1
        if method == "PATCH" and 200 <= status < 300 and node not in cordoned and path.split("?", maxsplit=1)[0] == node_path:
            cordoned[node] = time.time()

    def make() -> KubeApi:
        # taint_tls: the taint identity's own connection trusts the same CA (a shared context names no file).
        api = KubeApi(hall.url, node, hall.tokens[node], node_token=hall.taint_token, tls=tls, taint_tls=tls,
                      timeout_s=30.0)
        api.on_request = count
        return api
    return make


def start_runners(hall: Hall, nodes: list[str], t0: float, cordoned: dict[str, float],
                  kinds: dict[str, int] | None = None) -> tuple[list[DrainRunner], dict[str, list[int]]]:
    counts: dict[str, list[int]] = {node: [] for node in nodes}
    runners = []
    d = hall.deadline_s
    for node in nodes:
        spec = DrainSpec(notice_id=f"fleet-{node}", kind="reclaim", deadline=t0 + d,
                         deadline_text="2030-01-01T00:00:00Z", received_at=t0,
                         ends=phase_ends(t0, t0 + d, Budget(int(d), 0, int(d) - 10, 10)),
                         taint_key="sco.io/notice", cordon_only=False, pdb_blocked="report", exclude_from_lb=False,
                         down_after_s=10.0, write_spread_s=SPREAD_S)
        runners.append(DrainRunner(spec, make_api(hall, node, counts[node], cordoned, kinds), lambda r: None))
    for r in runners:   # every notice lands within the same second
        r.start()
    return runners, counts


def _worker(hall: Hall, nodes: list[str], ready: Any, go: Any, t0: Any, stop: Any, done: Any, results: Any) -> None:
    from bench.fleet_report import ThreadRoles

    exit_with_parent()
    ready.release()
    go.wait()
    roles = ThreadRoles().start()
    me = psutil.Process()
    cpu0 = me.cpu_times()
    cordoned: dict[str, float] = {}
    kinds: dict[str, int] = {}
    runners, counts = start_runners(hall, nodes, t0.value, cordoned, kinds)
    while not stop.wait(0.2) and any(r.alive for r in runners):
        pass
    cpu1 = me.cpu_times()   # the drains' CPU, from the notice to the last drain's end (psutil)
    for r in runners:
        r.stop()
    with done.get_lock():
        done.value += 1
    with KINDS_LOCK:
        by_kind = dict(kinds)
    results.put((counts, roles.stop(), dict(cordoned), cpu1.user + cpu1.system - cpu0.user - cpu0.system, by_kind))


class AgentGroups:
    def __init__(self, hall: Hall, nodes: list[str], processes: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._n = max(1, min(processes, len(nodes)))
        self._ready = ctx.Semaphore(0)
        self._go, self._stop = ctx.Event(), ctx.Event()
        self._t0 = ctx.Value("d", 0.0)
        self._done = ctx.Value("i", 0)
        self._results = ctx.Queue()
        self.by_kind: dict[str, int] = {}   # every agent's requests by kind (``request_kind``), once stopped
        self._procs = [ctx.Process(target=_worker, name=f"fleet-agents-{i}", daemon=True,
                                   args=(hall, nodes[i::self._n], self._ready, self._go, self._t0, self._stop,
                                         self._done, self._results))
                       for i in range(self._n)]

    def prepare(self) -> AgentGroups:
        """Spawn the workers and wait until each is up (imports done), before anyone's notice."""
        for p in self._procs:
            p.start()
        for _ in self._procs:
            if not self._ready.acquire(timeout=READY_TIMEOUT_S):
                raise RuntimeError("an agent worker did not start")
        return self

    def start(self, t0: float) -> None:
        self._t0.value = t0
        self._go.set()

    def alive(self) -> bool:
        return int(self._done.value) < self._n

    def stop(self) -> tuple[dict[str, list[int]], dict[str, float], dict[str, float], float]:
        """Stop every agent; (statuses per node, CPU seconds by thread role, cordon wall time per
        node, the workers' CPU seconds from the notice to the drains' end) of all workers; their
        requests by kind in ``by_kind``."""
        self._stop.set()
        counts: dict[str, list[int]] = {}
        roles: dict[str, float] = {}
        cordoned: dict[str, float] = {}
        cpu = 0.0
        for _ in self._procs:
            got, by_role, cordons, cpu_s, kinds = self._results.get(timeout=120)
            for kind, n in kinds.items():
                self.by_kind[kind] = self.by_kind.get(kind, 0) + n
            counts.update(got)
            cordoned.update(cordons)
            cpu += cpu_s
            for k, v in by_role.items():
                roles[k] = round(roles.get(k, 0.0) + v, 1)
        for p in self._procs:   # reaped: their CPU is the bench's children's (CpuMeter)
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)
        return counts, roles, cordoned, round(cpu, 2)

