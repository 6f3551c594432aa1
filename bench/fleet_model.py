"""A discrete-event model of a hall reclaim against one API server, for what this machine cannot
run (issue 27, point 6): N agents (or a central drainer), API Priority and Fairness, and the
server's per-request costs measured by bench/fleet.py.

Run: ``python -m bench.fleet_model --calibrate RESULT.json [RESULT.json ...]`` fits the costs on
bench.fleet's JSON lines and prints each measured figure beside the model's; ``python -m
bench.fleet_model --costs COSTS.json`` (or the fit, with --calibrate) then runs 1,000 and 5,000
nodes x 30 pods at 120 s and 30 s deadlines for the agents and the central peers.

What is modelled (pure core: ``simulate`` takes plain data and returns plain data; no clock, no I/O):

- **The server**: one core (the share of it the run's server got, ``Costs.core_share``) serving
  the requests APF has dispatched, in order, each for its measured CPU cost (``Costs``); a request
  holds its seat until it is served. (FIFO rather than processor sharing: the same throughput, a
  different spread of latencies.)
- **APF** as kube-apiserver 1.20 does it (staging/src/k8s.io/apiserver/pkg/util/flowcontrol/
  fairqueuing/queueset/queueset.go; the API Priority and Fairness concept page): every priority
  level gets ``ceil(server concurrency x shares / sum of shares)`` seats (``--max-requests-inflight``
  400 + ``--max-mutating-requests-inflight`` 200); a request's flow (its user: ``ByUser``) is
  shuffle-sharded onto ``hand_size`` of the level's ``queues`` and joins the shortest of them, or is
  rejected (429) when that one holds ``queue_length_limit`` already; a free seat goes to the queue
  whose head has the smallest virtual finish time (fair queuing: each dispatch advances its queue's
  virtual start by one unit of service; a queue that wakes up starts at the current virtual time,
  not behind). Levels: the agents' ``sco-agent`` (40 shares, 128 queues, hand 6, deploy/kubernetes),
  ``system`` (30; the kubelets' leases and DELETEs, and the agents' pod LISTs), ``workload-low``
  (100; a central drainer's service account), ``exempt`` (the control plane; not limited).
- **A node's drain** (executor/kube/runner.py as measured): ``Costs.agent_setup`` requests (cordon,
  taint, lists) then evictions, each PDB paced by its watched room (maxUnavailable 50 % of 10: 5 at
  a time, room back once the kubelet has deleted the pod and the disruption controller rewritten
  the status), at most the agent's window in flight (executor/kube/pacing.py ``ConcurrencyLimit``:
  8 workers, an APF 429 halves it and is retried after Retry-After doubling to 8 s with jitter, a
  slow answer cuts it by a fifth, every other answer adds about 1/window); its further requests per
  pod (``Costs.agent_extra_per_pod``: mostly its PDB reads by name) each at a read's cost
  (``Costs.read``, fitted apart from the writes).
- **The central peer** (bench/fleet_peers.py): ``workers`` nodes at a time through one token bucket
  (qps, burst): GET + PATCH + LIST per node, an eviction per pod (a PDB 429 retried after 5 s), then
  a GET per pod per second until it is gone.
- **Leases**: every node's kubelet PUTs its Lease every 10 s (system level); the model reports
  their latency.
- **The disruption controller**, two ways (``Hall.controller_qps``): bench.fleet's (room back in a PDB
  ``Costs.controller_s`` after each pod is gone: its fake controller writes with 8 workers and no
  client limit, so the bench measures the API server and not the controller), or 1.20's, for the
  predictions (``--control-planes``): one worker (pkg/controller/disruption ``Run``), its own client at
  kube-controller-manager's default 20 requests a second (burst 30), a PDB queued once however often
  its pods change, each write giving back every pod gone under it since its sync began.

Left out (docs/kubernetes.md says so): watches (long-running, outside APF; their events' cost is
folded into the per-pod cost), etcd as a separate resource, the API server's memory and GC, the
clients' own CPU (each agent has its node), network latency, and APF's queue-wait timeout.
"""
from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import math
import random
import sys
from collections import deque
from collections.abc import Generator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

SERVER_SEATS = 600          # --max-requests-inflight 400 + --max-mutating-requests-inflight 200 (defaults)
PODS, PDBS, PODS_PER_PDB, ROOM = 30, 3, 10, 5
LEASE_S = 10.0
LINGER_S = 30.0             # executor/kube/runner.py: the agents stop this long past the deadline
CONTROLLER_QPS_1_20, CONTROLLER_BURST = 20.0, 30   # kube-controller-manager --kube-api-qps / --kube-api-burst defaults
IDEAL_SENDERS = 48
AGENT_WORKERS = 8           # executor/kube/drain_spec.py WORKERS: the window's ceiling
SLOW_FACTOR, SLOW_WINDOW, SLOW_FLOOR_S = 3.0, 32, 0.5   # executor/kube/pacing.py          # bench/fleet_ideal.py SENDERS (not imported: the model stays free of I/O modules)


@dataclass(frozen=True)
class Level:
    name: str
    shares: int               # 0: exempt (never queued)
    queues: int = 64
    hand_size: int = 6
    queue_length_limit: int = 50


# kube-apiserver 1.20's built-in levels (flowcontrol v1beta1 bootstrap configuration) plus sco-agent.
LEVELS_1_20 = (Level("system", 30, 64, 6, 50), Level("leader-election", 10, 16, 4, 50),
               Level("workload-high", 40, 128, 6, 50), Level("workload-low", 100, 128, 6, 50),
               Level("global-default", 20, 128, 6, 50), Level("catch-all", 5, 1, 1, 50),
               Level("sco-agent", 40, 128, 6, 50), Level("exempt", 0))


@dataclass(frozen=True)
class Costs:
    """Server CPU seconds per request kind, and the share of its core the server had."""

    eviction: float = 0.004       # the eviction itself: PDB status write + pod update
    pod_gone: float = 0.004       # what follows per pod: the kubelet's DELETE, the PDB status PUT, watch events
    request: float = 0.002        # any other short request (PATCH, LIST of a node's pods, discovery)
    read: float = 0.002           # a GET of one object by name: the agents' PDB reads, the central peer's pod polls
    lease: float = 0.002          # a Lease PUT
    core_share: float = 1.0
    agent_setup: int = 8          # requests before a node's first eviction
    agent_extra_per_pod: float = 0.5   # further short requests per pod (replans, relists)
    kubelet_s: float = 0.15       # eviction accepted -> pod gone (the fake kubelet's turn)
    controller_s: float = 0.15    # pod gone -> PDB status rewritten (the fake controller's turn)
    retry_s: float = 1.0          # after an APF 429 (Retry-After)
    agent_cpu_per_pod: float = 0.0     # the agent's own CPU per pod drained (bench.fleet: psutil)
    client_core_share: float = 1.0     # the share of the agents' core they got, where they share one


@dataclass(frozen=True)
class Hall:
    nodes: int
    deadline_s: float
    drainer: str = "agents"       # agents | central (qps, burst below)
    qps: float = 5.0
    burst: int = 10
    workers: int = 10
    horizon_s: float = 600.0
    leases: bool = True
    seed: int = 1
    shared_client_core: bool = False   # every agent on one core, as in bench.fleet (else each on its node)
    max_inflight: int = 0              # evictions in flight at most, all nodes together (0: no bound;
                                       # bench.fleet's ideal drainer: its SENDERS threads)
    setup: bool = True                 # False: no request before the first eviction (the ideal drainer)
    aimd: bool = True                  # the agents' eviction window (False: the ideal drainer's exact pacing only)
    controller_qps: float = 0.0        # 0: the bench's disruption controller (room back ``controller_s`` after each
                                       # pod); else 1.20's (see ``_Sim.on_controller``): one worker, its own client
                                       # limited to this many requests a second (burst ``CONTROLLER_BURST``)


@dataclass
class Result:
    nodes: int
    pods: int
    deadline_s: float
    drainer: str
    pods_out_by_deadline: int = 0
    pods_out: int = 0
    time_to_drain_all_s: float | None = None
    evictions_per_s: float = 0.0
    share_on_time: float = 0.0
    p99_s: float | None = None
    lease_p99_ms: float | None = None
    lease_failures: int = 0
    rejected: int = 0
    requests: int = 0
    sent: int = 0
    served: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pods_out_by_deadline_share(self) -> float:
        return self.pods_out_by_deadline / self.pods if self.pods else 0.0


# -- APF ---------------------------------------------------------------------------------------------
@dataclass
class Request:
    flow: str
    level: str
    cost: float
    kind: str
    owner: int                     # node index (-1: none)
    sent_at: float = 0.0
    tag: Any = None
    tag_queue: int = 0
    on_done: Any = None           # the central worker waiting for it


class _Queue:
    __slots__ = ("executing", "requests", "virtual_start")

    def __init__(self) -> None:
        self.requests: deque[Request] = deque()
        self.virtual_start = 0.0
        self.executing = 0


def hand(flow: str, queues: int, hand_size: int) -> list[int]:
    """The flow's hand of distinct queues: shuffle sharding, deterministic in the flow's hash
    (shufflesharding.Dealer deals from a 64-bit hash of the flow identifier)."""
    seed = int.from_bytes(hashlib.sha256(flow.encode()).digest()[:8], "big")
    return random.Random(seed).sample(range(queues), min(hand_size, queues))


class PriorityLevel:
    """One level's seats and queues: enqueue (or reject), and dispatch by fair queuing."""

    def __init__(self, level: Level, seats: int) -> None:
        self.level, self.seats, self.in_use = level, seats, 0
        self.queues = [_Queue() for _ in range(max(1, level.queues))]
        self._hands: dict[str, list[int]] = {}
        self._ready: list[tuple[float, int]] = []     # (virtual start, queue) of non-empty queues
        self.virtual_time = 0.0
        self.rejected = 0
        self.waiting = 0

    def enqueue(self, req: Request) -> bool:
        """False: rejected (the shortest queue of the flow's hand is full)."""
        h = self._hands.get(req.flow)
        if h is None:
            h = self._hands[req.flow] = hand(req.flow, len(self.queues), self.level.hand_size)
        best = min(h, key=lambda i: len(self.queues[i].requests) + self.queues[i].executing)
        q = self.queues[best]
        if len(q.requests) >= self.level.queue_length_limit:
            self.rejected += 1
            return False
        if not q.requests:
            if q.executing == 0:
                q.virtual_start = max(q.virtual_start, self.virtual_time)   # a waking queue is not behind
            heapq.heappush(self._ready, (q.virtual_start, best))
        q.requests.append(req)
        req.tag_queue = best
        self.waiting += 1
        return True

    def dispatch(self) -> Request | None:
        """The next request to run, if a seat is free: the queue with the smallest virtual start
        (every request one unit of service, so the smallest virtual finish too)."""
        if self.in_use >= self.seats or not self._ready:
            return None
        _, i = heapq.heappop(self._ready)
        q = self.queues[i]
        req = q.requests.popleft()
        self.virtual_time = q.virtual_start
        q.virtual_start += 1.0
        q.executing += 1
        self.in_use += 1
        self.waiting -= 1
        if q.requests:
            heapq.heappush(self._ready, (q.virtual_start, i))
        return req

    def finish(self, req: Request) -> None:
        self.in_use -= 1
        self.queues[req.tag_queue].executing -= 1


def seats_of(levels: tuple[Level, ...], total: int = SERVER_SEATS) -> dict[str, int]:
    """Each limited level's concurrency limit: ceil(total x shares / sum of shares)."""
    shares = sum(lv.shares for lv in levels if lv.shares)
    return {lv.name: math.ceil(total * lv.shares / shares) if lv.shares else 1 << 30 for lv in levels}


class Server:
    """APF in front of one core shared by the dispatched requests (processor sharing: n requests
    running each progress at ``core_share / n`` CPU-seconds per second, as goroutines on one core
    do), each needing its measured cost (see the module doc). Kept in virtual work: ``work``
    grows at ``core_share / n``; a request admitted at work w with cost c is done when work
    reaches w + c -- O(log n) per event."""

    def __init__(self, levels: tuple[Level, ...], core_share: float, total_seats: int = SERVER_SEATS) -> None:
        seats = seats_of(levels, total_seats)
        self.levels = {lv.name: PriorityLevel(lv, seats[lv.name]) for lv in levels}
        self.core_share = core_share
        self.work = 0.0
        self.t = 0.0
        self.running: list[tuple[float, int, Request]] = []
        self._seq = 0
        self.busy_s = 0.0
        self.served = 0
        self.version = 0

    def _advance(self, now: float) -> None:
        n = len(self.running)
        if n and now > self.t:
            self.work += (now - self.t) * self.core_share / n
            self.busy_s += now - self.t
        self.t = max(self.t, now)

    def admit(self, req: Request, now: float) -> bool:
        """False: rejected (429). Otherwise queued, or running if a seat was free."""
        self._advance(now)
        if not self.levels[req.level].enqueue(req):
            return False
        self._start(req.level)
        return True

    def _start(self, level: str) -> None:
        pl = self.levels[level]
        while (req := pl.dispatch()) is not None:
            self._seq += 1
            heapq.heappush(self.running, (self.work + req.cost, self._seq, req))
        self.version += 1

    def next_done(self) -> float | None:
        if not self.running:
            return None
        return self.t + max(0.0, self.running[0][0] - self.work) * len(self.running) / self.core_share

    def complete(self, now: float) -> list[Request]:
        """The requests done by ``now``; their seats go to whoever waits."""
        self._advance(now)
        done = []
        while self.running and self.running[0][0] <= self.work + 1e-12:
            req = heapq.heappop(self.running)[2]
            self.levels[req.level].finish(req)
            self.served += 1
            done.append(req)
        for req in done:
            self._start(req.level)
        self.version += 1
        return done


def take_token(tokens: float, since: float, now: float, qps: float, burst: int) -> tuple[float, float, float]:
    """client-go's token bucket (flowcontrol.NewTokenBucketRateLimiter): refill at ``qps`` up to
    ``burst`` since ``since``, take one. Returns (tokens left, now, how long the request waits)."""
    tokens = min(float(burst), tokens + (now - since) * qps) - 1.0
    return tokens, now, max(0.0, -tokens / qps)


# -- the simulation ----------------------------------------------------------------------------------
Worker = Generator[tuple[str, Any], Any, None]


class _Worker:
    """A central worker: its generator (what it does next) and the node it is on."""

    def __init__(self) -> None:
        self.gen: Worker
        self.started = False
        self.node = -1


class _Sim:
    def __init__(self, hall: Hall, costs: Costs, levels: tuple[Level, ...]) -> None:
        self.hall, self.costs = hall, costs
        self.server = Server(levels, costs.core_share)
        self.events: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self.rng = random.Random(hall.seed)
        n = hall.nodes
        self.todo = [[PODS_PER_PDB] * PDBS for _ in range(n)]      # pods not yet evicted, per PDB
        self.room = [[ROOM] * PDBS for _ in range(n)]
        self.left = [PODS] * n
        self.gone = [[False] * PODS for _ in range(n)]            # the central peer's view, per pod
        self.extra_owed = [0.0] * n
        self.gone_at: list[float] = []
        self.empty_at: dict[int, float] = {}
        self.lease_lat: list[float] = []
        self.lease_fail = 0
        self.rejected = 0
        self.sent = 0
        self.tokens, self.token_t = float(hall.burst), 0.0
        self.central_queue: deque[int] = deque(range(n))
        self.client_free_at = 0.0
        self.inflight = 0
        self.pending: deque[Request] = deque()
        # Each agent's eviction window (executor/kube/pacing.py ConcurrencyLimit): AIMD over its workers.
        self.limit = [float(AGENT_WORKERS)] * n
        self.cut_at = [-math.inf] * n
        self.in_node = [0] * n
        self.throttles = [0] * n
        self.fast: list[deque[float]] = [deque(maxlen=SLOW_WINDOW) for _ in range(n)]
        # 1.20's disruption controller: its work queue of PDBs (a key queued once however often it is
        # dirtied), the pods gone under each PDB since its last sync began, its own token bucket.
        self.pdb_queue: deque[tuple[int, int]] = deque()
        self.pdb_queued: set[tuple[int, int]] = set()
        self.gone_unsynced: dict[tuple[int, int], int] = {}
        self.controller_busy = False
        self.ctl_tokens, self.ctl_token_t = float(CONTROLLER_BURST), 0.0
        self.controller_writes = 0

    def at(self, t: float, kind: str, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, data))

    def send(self, now: float, req: Request) -> None:
        req.sent_at = now
        self.sent += 1
        if not self.server.admit(req, now):
            self.rejected += 1
            self.at(now, "rejected", req)
        self._schedule_cpu()

    def _schedule_cpu(self) -> None:
        t = self.server.next_done()
        if t is not None:
            self.at(t, "cpu", self.server.version)

    def on_cpu(self, now: float, version: int) -> None:
        if version != self.server.version:
            return                                            # superseded by a later arrival or completion
        for req in self.server.complete(now):
            self.served(now, req)
        self._schedule_cpu()

    def run(self) -> Result:
        hall = self.hall
        if hall.leases:
            for i in range(hall.nodes):
                self.at(self.rng.uniform(0, LEASE_S), "lease", i)
        if hall.drainer == "agents":
            for i in range(hall.nodes):
                self.at(self.rng.uniform(0, 1.0), "agent_start", i)   # first_write_spread 1 s
        else:
            for _ in range(hall.workers):
                w = _Worker()
                w.gen = self._central_worker(w)
                self._step(0.0, w, None)
        while self.events:
            now, _, kind, data = heapq.heappop(self.events)
            if now > hall.horizon_s or len(self.empty_at) == hall.nodes:
                break
            getattr(self, "on_" + kind)(now, data)
        return self.result()

    # leases: the kubelet's node identity, the system level
    def on_lease(self, now: float, node: int) -> None:
        self.send(now, Request(f"system:node:n{node}", "system", self.costs.lease, "lease", node))
        self.at(now + LEASE_S, "lease", node)

    # the agents
    def _agent(self, node: int, kind: str, cost: float, tag: Any = None) -> Request:
        return Request(f"system:node:n{node}", "sco-agent", cost, kind, node, tag=tag)

    def on_agent_start(self, now: float, node: int) -> None:
        if not self.hall.setup:
            self._agent_evict_all(now, node)
            return
        self.send(now, self._agent(node, "setup", self.costs.request, tag=self.costs.agent_setup - 1))

    def _agent_evict_all(self, now: float, node: int) -> None:
        c = self.costs
        for k in range(PDBS):
            while self.room[node][k] > 0 and self.todo[node][k] > 0 and \
                    (not self.hall.aimd or self.in_node[node] < max(1, int(self.limit[node]))):
                self.room[node][k] -= 1
                self.todo[node][k] -= 1
                self.in_node[node] += 1
                req = self._agent(node, "eviction", c.eviction, tag=k)
                if self.hall.max_inflight and self.inflight >= self.hall.max_inflight:
                    self.pending.append(req)
                elif self.hall.shared_client_core and c.agent_cpu_per_pod > 0:
                    # The agents' own work for this pod, queued on the one core they share.
                    self.client_free_at = max(now, self.client_free_at) + c.agent_cpu_per_pod / c.client_core_share
                    self.inflight += 1
                    self.at(self.client_free_at, "resend", req)
                else:
                    self.inflight += 1
                    self.send(now, req)

    # the central peer: ``workers`` synchronous workers (generators) behind one token bucket
    def _central_worker(self, w: _Worker) -> Worker:
        c = self.costs
        while self.central_queue:
            node = w.node = self.central_queue.popleft()
            for _ in range(3):                                         # GET node, PATCH (cordon), LIST pods
                yield "request", ("setup", c.request, None)
            retry_at = dict.fromkeys(range(PODS), 0.0)
            evicted: set[int] = set()
            while retry_at or evicted:
                now = yield "now", None
                for j in [j for j, t in retry_at.items() if t <= now]:
                    accepted = yield "request", ("eviction", c.eviction, (j, j % PDBS))
                    if accepted:
                        del retry_at[j]
                        evicted.add(j)
                    else:
                        retry_at[j] = (yield "now", None) + 5.0          # kubectl drain's wait after a PDB 429
                for j in sorted(evicted):
                    yield "request", ("poll", c.read, None)
                    if self.gone[node][j]:
                        evicted.discard(j)
                if retry_at or evicted:
                    yield "sleep", 1.0

    def _step(self, now: float, w: _Worker, value: Any) -> None:
        """Run the worker until it waits on the server or a timer."""
        try:
            while True:
                if not w.started:
                    w.started = True
                    what, arg = next(w.gen)
                else:
                    what, arg = w.gen.send(value)
                if what == "now":
                    value = now
                    continue
                if what == "sleep":
                    self.at(now + arg, "wake", (w, True))
                    return
                kind, cost, tag = arg
                req = Request("central", "workload-low", cost, kind, w.node, tag=tag, on_done=w)
                self.tokens, self.token_t, wait = take_token(self.tokens, self.token_t, now, self.hall.qps,
                                                             self.hall.burst)
                self.at(now + wait, "central_go", req)
                return
        except StopIteration:
            return

    def on_wake(self, now: float, data: tuple[_Worker, Any]) -> None:
        self._step(now, data[0], data[1])

    def on_central_go(self, now: float, req: Request) -> None:
        self.send(now, req)

    # answers
    def on_rejected(self, now: float, req: Request) -> None:
        if req.kind == "lease":
            self.lease_fail += 1
            return                                           # the next renewal is 10 s on
        node = req.owner
        if req.kind == "eviction" and req.flow != "central" and self.hall.aimd:
            # pacing.ConcurrencyLimit: an APF 429 halves the window, once per round trip; the retry
            # waits Retry-After (1 s) doubling while throttled, up to 8 s, plus up to 50 % jitter.
            if req.sent_at > self.cut_at[node]:
                self.limit[node] = max(1.0, self.limit[node] * 0.5)
                self.cut_at[node] = now
            self.throttles[node] += 1
            delay = min(8.0, self.costs.retry_s * 2 ** (self.throttles[node] - 1)) * (1 + 0.5 * self.rng.random())
            self.at(now + delay, "resend", req)
            return
        self.at(now + self.costs.retry_s, "resend", req)

    def on_resend(self, now: float, req: Request) -> None:
        self.send(now, req)

    def served(self, now: float, req: Request) -> None:
        node = req.owner
        if req.kind == "lease":
            self.lease_lat.append(now - req.sent_at)
        elif req.on_done is not None:                        # the central peer's
            result: Any = True
            if req.kind == "eviction":
                j, k = req.tag
                result = self.room[node][k] > 0
                if result:
                    self.room[node][k] -= 1
                    self.at(now + self.costs.kubelet_s, "pod_gone", (node, k, j))
            self._step(now, req.on_done, result)
        elif req.kind == "setup":
            if req.tag > 0:
                self.send(now, self._agent(node, "setup", req.cost, tag=req.tag - 1))
            else:
                self._agent_evict_all(now, node)
        elif req.kind == "pdb_status":
            k, synced = req.tag
            self.room[node][k] += synced
            self.controller_busy = False
            self._controller_next(now)
            if self.hall.drainer == "agents":
                self._agent_evict_all(now, node)
        elif req.kind == "eviction":
            self.at(now + self.costs.kubelet_s, "pod_gone", (node, req.tag, -1))
            if self.hall.aimd:
                self._aimd_answered(now, req)
            self.inflight -= 1
            if self.pending:
                self.inflight += 1
                self.send(now, self.pending.popleft())

    def _aimd_answered(self, now: float, req: Request) -> None:
        node = req.owner
        self.in_node[node] -= 1
        self.throttles[node] = 0
        latency = now - req.sent_at
        fast = self.fast[node]
        slow = bool(fast) and latency > SLOW_FACTOR * min(fast) and latency > SLOW_FLOOR_S
        fast.append(latency)
        if slow:
            if req.sent_at > self.cut_at[node]:
                self.limit[node] = max(1.0, self.limit[node] * 0.8)
                self.cut_at[node] = now
        else:
            self.limit[node] = min(float(AGENT_WORKERS), self.limit[node] + (1.0 + 0.5 * (self.rng.random() - 0.5))
                                   / self.limit[node])
        self._agent_evict_all(now, node)

    def on_pod_gone(self, now: float, data: tuple[int, int, int]) -> None:
        node, k, j = data
        # The kubelet's DELETE, the controller's PDB PUT and the watch events: per pod, on the core.
        self.send(now, Request("control-plane", "exempt", self.costs.pod_gone, "gone", node))
        self.gone_at.append(now)
        self.left[node] -= 1
        if j >= 0:
            self.gone[node][j] = True
        if self.left[node] == 0:
            self.empty_at[node] = now
        if self.hall.controller_qps > 0:
            key = (node, k)
            self.gone_unsynced[key] = self.gone_unsynced.get(key, 0) + 1
            if key not in self.pdb_queued:
                self.pdb_queued.add(key)
                self.pdb_queue.append(key)
            self._controller_next(now)
        else:
            self.at(now + self.costs.controller_s, "room_back", (node, k, j))
        if j < 0:
            self.extra_owed[node] += self.costs.agent_extra_per_pod
            while self.extra_owed[node] >= 1.0:
                self.extra_owed[node] -= 1.0
                self.send(now, self._agent(node, "extra", self.costs.read))

    # 1.20's disruption controller (pkg/controller/disruption/disruption.go: ``Run`` starts one
    # ``dc.worker``; each sync of a PDB reads the pods from its informer and writes the status once; the
    # controller's client has kube-controller-manager's --kube-api-qps 20 / --kube-api-burst 30 to
    # itself). Its writes are the ``workload-high`` level's (the kube-controller-manager and
    # kube-system service-account FlowSchemas of 1.20's bootstrap configuration).
    def _controller_next(self, now: float) -> None:
        if self.controller_busy or not self.pdb_queue:
            return
        self.controller_busy = True
        self.ctl_tokens, self.ctl_token_t, wait = take_token(self.ctl_tokens, self.ctl_token_t, now,
                                                             self.hall.controller_qps, CONTROLLER_BURST)
        self.at(now + wait, "controller", None)

    def on_controller(self, now: float, _: Any) -> None:
        key = self.pdb_queue.popleft()
        self.pdb_queued.discard(key)
        synced = self.gone_unsynced.pop(key, 0)            # what its informer shows at the sync's start
        self.controller_writes += 1
        self.send(now, Request("system:serviceaccount:kube-system:disruption-controller", "workload-high",
                               self.costs.request, "pdb_status", key[0], tag=(key[1], synced)))

    def on_room_back(self, now: float, data: tuple[int, int, int]) -> None:
        node, k, j = data
        self.room[node][k] += 1
        if j < 0:
            self._agent_evict_all(now, node)

    def result(self) -> Result:
        h = self.hall
        pods = h.nodes * PODS
        out = sum(1 for t in self.gone_at if t <= h.deadline_s)
        times = sorted(self.empty_at.get(i, math.inf) for i in range(h.nodes))
        done = times[-1] if len(self.empty_at) == h.nodes else None
        window = done if done is not None else h.horizon_s
        lat = sorted(self.lease_lat)
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        return Result(h.nodes, pods, h.deadline_s, h.drainer if h.drainer == "agents" else f"central {h.qps:g} QPS",
                      pods_out_by_deadline=out, pods_out=len(self.gone_at), time_to_drain_all_s=None if done is None else round(done, 2),
                      evictions_per_s=round(len(self.gone_at) / window, 1) if window else 0.0,
                      share_on_time=round(sum(1 for t in times if t <= h.deadline_s) / h.nodes, 4),
                      p99_s=None if p99 == math.inf else round(p99, 2),
                      lease_p99_ms=round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1) if lat else None,
                      lease_failures=self.lease_fail, rejected=self.rejected, requests=self.sent, sent=self.sent,
                      served=self.server.served, extra={"server_busy_s": round(self.server.busy_s, 1),
                                                          "pdb_status_writes": self.controller_writes})


def simulate(hall: Hall, costs: Costs, levels: tuple[Level, ...] = LEVELS_1_20) -> Result:
    """One hall reclaim in the model (pure: plain data in, plain data out)."""
    return _Sim(hall, costs, levels).run()


# -- calibration on bench.fleet's results ----------------------------------------------------------
def available(row: dict[str, Any]) -> tuple[float, float]:
    """(server core, client core) shares the run left to the bench in this row: 1 less what other
    processes used of each (the rows' ``load`` and ``cpu_s``: a shared machine)."""
    load, cpu = row.get("load") or {}, row.get("cpu_s") or {}
    wall = load.get("wall_s") or row["ran_s"]
    others_server = load.get("server_core_others_s") or 0.0
    others_client = max(0.0, (cpu.get("others_on_machine") or 0.0) - others_server)
    return max(0.05, 1 - others_server / wall), max(0.05, 1 - others_client / wall)


def _reads(row: dict[str, Any]) -> float:
    """The GETs by name a row's drainer sent: the agents' PDB reads (their requests by kind), the
    central peer's pod polls (every request beyond its evictions and its 3 a node)."""
    if row["drainer"] == "agents":
        return float((row.get("agent_requests_by_kind") or {}).get("pdbs.get") or 0)
    if row["drainer"] in ("central", "central50"):
        return max(0.0, (float(row["requests_per_pod"]) - 1.0) * float(row["pods_out"]) - 3.0 * float(row["nodes"]))
    return 0.0


def fit_costs(rows: list[dict[str, Any]], base: Costs = Costs()) -> Costs:
    """The costs from bench.fleet's rows: the server's CPU (API server + etcd) in each row as
    ``per_pod x pods out + per_read x GETs by name + per_request x (every other request: the
    drainer's beyond one eviction per pod and its reads, and the lease renewals)``, fitted by least
    squares over the rows (``per_pod`` split evenly between the eviction and what follows it: the
    kubelet's DELETE, the PDB status write, the watch events); a read is priced apart because
    a GET of one key is far cheaper than a write, and a drain may send several a pod. Where the
    rows cannot tell the three apart (or one comes out below 0), reads are priced as any request.
    The agents' requests beyond their evictions per node and per pod counted from their requests by
    kind (``agent_requests_counted``; by least squares, ``per_node_and_per_pod``, from rows without
    the counts), their own CPU per pod the rows' median. ``core_share`` 1: a whole
    core for the server (``compare`` puts each row's own in)."""
    used = [r for r in rows if not r.get("error") and r.get("pods_out") and r.get("requests_per_pod") is not None
            and r.get("drainer") != "kubectl"]     # kubectl's request count is the server's, background included
    if not used:
        raise ValueError("no completed row to calibrate on")
    xs, ys, extra = [], [], []
    for r in used:
        cpu = r["cpu_s"]
        reads = _reads(r)
        others = max(0.0, (r["requests_per_pod"] - 1.0) * r["pods_out"] - reads) + \
            ((r.get("lease") or {}).get("renewals") or 0)
        xs.append((float(r["pods_out"]), reads, others))
        ys.append(cpu["kube-apiserver"] + cpu["etcd"])
        if r["drainer"] == "agents":
            # The agents' requests beyond one eviction per pod: some per node (cordon, condition, taint,
            # discovery, the lists and watches), some per pod (PDB reads, confirmations, retries).
            extra.append((float(r["nodes"]), float(r["pods_out"]), (r["requests_per_pod"] - 1.0) * r["pods_out"]))
    fit3 = least_squares_n([([a, b, c], y) for (a, b, c), y in zip(xs, ys, strict=True)])
    if fit3 is not None and min(fit3) > 0:
        per_pod, per_read, per_req = fit3
    else:
        fit = least_squares([(a, b + c, y) for (a, b, c), y in zip(xs, ys, strict=True)])
        if fit is None or fit[1] <= 0:   # the rows cannot tell the two apart: every request's cost in the pod's
            per_pod = sum(a * y for (a, _, _), y in zip(xs, ys, strict=True)) / sum(a * a for a, _, _ in xs)
            per_req = base.request * 0.1
        else:
            per_pod, per_req = fit
        per_read = per_req
    agent_cpu = sorted(r["agent_cpu_s_per_pod"] for r in used if r.get("agent_cpu_s_per_pod"))
    counted = agent_requests_counted(used)
    if counted is not None:
        setup, per_pod_extra = counted
    else:
        setup, per_pod_extra = per_node_and_per_pod(extra) if extra else (float(base.agent_setup),
                                                                          base.agent_extra_per_pod)
    return replace(base, eviction=round(per_pod / 2, 5), pod_gone=round(per_pod / 2, 5), request=round(per_req, 5),
                   read=round(per_read, 5), lease=round(per_req, 5), core_share=1.0, agent_setup=max(1, round(setup)),
                   agent_extra_per_pod=round(per_pod_extra, 3),
                   agent_cpu_per_pod=round(agent_cpu[len(agent_cpu) // 2], 4) if agent_cpu else 0.0)


# What a drain sends before its first eviction (bench/fleet_agents.py ``request_kind``): the Node's GET,
# PATCHes and condition, discovery, the pod list and watch, the PDB lists and watches.
SETUP_KINDS = frozenset({"node.get", "node.patch", "node.patch.status", "GET /api/v1", "pods.list.cache",
                         "pods.watch", "pdbs.list", "pdbs.watch"})


def agent_requests_counted(rows: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(requests a node before its evictions, further requests a pod out), counted from the agents'
    rows' requests by kind (the median over the rows): a setup kind is counted whatever its answer;
    every other request but an accepted eviction -- PDB reads, confirmations, refused or unanswered
    evictions -- is a further one. None when no row has the counts (``per_node_and_per_pod`` fits
    them then)."""
    per_node, per_pod = [], []
    for r in rows:
        kinds = r.get("agent_requests_by_kind")
        if r.get("drainer") != "agents" or not kinds or not r.get("nodes") or not r.get("pods_out"):
            continue
        setup = sum(n for kind, n in kinds.items() if kind.split(" -> ")[0] in SETUP_KINDS)
        rest = sum(kinds.values()) - setup - kinds.get("eviction", 0)
        per_node.append(setup / r["nodes"])
        per_pod.append(rest / r["pods_out"])
    if not per_node:
        return None
    return sorted(per_node)[len(per_node) // 2], sorted(per_pod)[len(per_pod) // 2]


def least_squares_n(rows: list[tuple[list[float], float]]) -> list[float] | None:
    """The coefficients p minimising the squared error of ``y = sum(p_i x_i)`` over (x, y) rows (the
    normal equations, solved by Gaussian elimination with partial pivoting); None when the rows
    cannot tell the x_i apart."""
    if not rows:
        return None
    n = len(rows[0][0])
    m = [[sum(x[i] * x[j] for x, _ in rows) for j in range(n)] + [sum(x[i] * y for x, y in rows)] for i in range(n)]
    scale = max((abs(v) for row in m for v in row[:n]), default=0.0)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) <= 1e-12 * max(scale, 1e-300):
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [a - f * b for a, b in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def least_squares(rows: list[tuple[float, float, float]]) -> tuple[float, float] | None:
    """(p, q) minimising the squared error of ``y = p x a + q x b`` over (a, b, y) rows; None when
    the rows cannot tell a from b."""
    fit = least_squares_n([([a, b], y) for a, b, y in rows])
    return None if fit is None else (fit[0], fit[1])


def per_node_and_per_pod(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(requests per node, requests per pod) from (nodes, pods out, requests beyond one eviction per
    pod) by least squares, neither below 0: a hall of many nodes with few pods out pays the nodes'
    part whatever its pods do, which a per-pod median alone would smear over the few pods."""
    fit = least_squares(rows)
    if fit is not None and fit[0] >= 0 and fit[1] >= 0:
        return fit
    # One of them would be negative: the other alone, fitted through the origin.
    saa = sum(a * a for a, _, _ in rows)
    sbb = sum(b * b for _, b, _ in rows)
    node_only = sum(a * y for a, _, y in rows) / saa if saa else 0.0
    pod_only = sum(b * y for _, b, y in rows) / sbb if sbb else 0.0
    err_node = sum((y - node_only * a) ** 2 for a, _, y in rows)
    err_pod = sum((y - pod_only * b) ** 2 for _, b, y in rows)
    return (node_only, 0.0) if err_node <= err_pod else (0.0, pod_only)


def compare(row: dict[str, Any], costs: Costs) -> dict[str, Any]:
    """A measured row beside the model's prediction of it (with the cores the row had: its
    server core less others' use, the agents on one shared core as in the bench), and each
    figure's relative error."""
    drainer = row["drainer"]
    if drainer == "kubectl":      # N kubectl processes: not in the model
        return {"label": row["label"], "nodes": row["nodes"], "modelled": False}
    server_share, client_share = available(row)
    hall = Hall(row["nodes"], row["deadline_s"], "agents" if drainer in ("agents", "ideal") else "central",
                qps=50.0 if drainer == "central50" else 5.0, burst=100 if drainer == "central50" else 10,
                # As long as the row could run (its cap), not as long as it took: a model slower than
                # the row must still be seen finishing, or its rate is cut off at the row's end.
                horizon_s=max(row["ran_s"], row.get("cap_s") or 0.0), shared_client_core=drainer == "agents",
                max_inflight=IDEAL_SENDERS if drainer == "ideal" else 0, setup=drainer != "ideal",
                aimd=drainer != "ideal")
    # The fake kubelets' and disruption controller's turn-arounds as this row measured them (they share
    # the bench's core with the drainers, so they slow down with the load), where the row has them.
    plane = row.get("control_plane") or {}
    res = simulate(hall, replace(costs, core_share=server_share, client_core_share=client_share,
                                 agent_cpu_per_pod=row.get("agent_cpu_s_per_pod") or costs.agent_cpu_per_pod,
                                 kubelet_s=plane.get("kubelet_s") or costs.kubelet_s,
                                 controller_s=plane.get("controller_s") or costs.controller_s))
    pairs = {"evictions_per_s": (row["evictions_per_s"], res.evictions_per_s),
             "pods_out_by_deadline_share": (row["pods_out_by_deadline_share"], round(res.pods_out_by_deadline_share, 4)),
             "time_to_drain_all_s": (row["time_to_drain_all_s"], res.time_to_drain_all_s),
             "lease_p99_ms": ((row.get("lease") or {}).get("p99_ms"), res.lease_p99_ms)}
    out: dict[str, Any] = {"label": row["label"], "nodes": row["nodes"], "server_core": round(server_share, 2),
                           "client_core": round(client_share, 2), "control_plane": plane or None}
    for k, (m, p) in pairs.items():
        err = None if m in (None, 0) or p is None else round(abs(p - m) / m, 3)
        out[k] = {"measured": m, "model": p, "error": err}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_model")
    parser.add_argument("--calibrate", nargs="*", default=[], help="bench.fleet output files (the JSON line is read)")
    parser.add_argument("--costs", help="a JSON file of Costs (skips the fit)")
    parser.add_argument("--nodes", default="1000,5000")
    parser.add_argument("--deadlines", default="120,30")
    parser.add_argument("--min-nodes", type=int, default=50)
    parser.add_argument("--max-nodes", type=int, default=400)
    parser.add_argument("--horizon", type=float, default=3600.0, help="how long the central peers run, at most")
    parser.add_argument("--server-cores", default="1,8",
                        help="the server's cores in the predictions: 1 is this machine's pinned core; a production "
                             "control plane has several")
    parser.add_argument("--control-planes", default="bench,1.20",
                        help="the disruption controller in the predictions: bench (bench.fleet's: room back "
                             "controller_s after each pod) and/or 1.20 (one worker, 20 requests a second)")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for path in args.calibrate:
        with open(path, encoding="utf-8") as f:
            for text in f:
                if text.startswith("{"):
                    rows.extend(json.loads(text)["results"])
    rows = [r for r in rows if not r.get("error") and args.min_nodes <= r["nodes"] <= args.max_nodes]
    if args.costs:
        with open(args.costs, encoding="utf-8") as f:
            costs = Costs(**json.load(f))
    elif rows:
        costs = fit_costs(rows)
    else:
        costs = Costs()
    print(json.dumps({"costs": asdict(costs)}), flush=True)
    for row in rows:
        print(json.dumps({"calibration": compare(row, costs)}), flush=True)
    planes = {"bench": 0.0, "1.20": CONTROLLER_QPS_1_20}
    unknown = set(args.control_planes.split(",")) - set(planes)
    if unknown:
        parser.error(f"--control-planes: unknown {sorted(unknown)} (known: {sorted(planes)})")
    for plane, cores, n, d in ((p, float(c), int(n), float(d)) for p in args.control_planes.split(",")
                               for c in args.server_cores.split(",")
                               for n in args.nodes.split(",") for d in args.deadlines.split(",")):
        # The agents give up 30 s past the deadline (runner.LINGER_S); the central peers run on.
        for drainer, qps, burst, horizon in (("agents", 5.0, 10, d + LINGER_S), ("central", 5.0, 10, args.horizon),
                                             ("central", 50.0, 100, args.horizon)):
            res = simulate(Hall(n, d, drainer, qps=qps, burst=burst, horizon_s=horizon,
                                controller_qps=planes[plane]), replace(costs, core_share=cores))
            print(json.dumps({"model": {**asdict(res), "horizon_s": horizon, "server_cores": cores,
                                        "control_plane": plane,
                                        "pods_out_by_deadline_share": round(res.pods_out_by_deadline_share, 4)}}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
