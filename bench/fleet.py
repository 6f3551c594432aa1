"""Benchmark: a hall-wide reclaim -- N nodes noticed in the same second -- against one real API server,
measured against the server's own limit.

Run from the repository root: ``python -m bench.fleet`` (the full run: 29 min on 2 cores shared with
other sessions, 3 Dec), or
``python -m bench.fleet --quick`` (or ``FLEET_QUICK=1``: a few minutes, for development).

The cluster (bench/fleet_cluster.py): kube-apiserver v1.20.2 + etcd with TLS (the rig of
tests/rigs), nodes of 30 running pods each in the node's namespace under 3 PDBs (10 pods each,
maxUnavailable 50 %), the real-server tier's fake kubelet and disruption controller, and every
node's kubelet Lease renewed every 10 s as its node identity (bench/fleet_lease.py).

- **Pinning**: kube-apiserver and etcd run on one core (``taskset -a -cp``, every thread), the
  bench and everything it starts (agents, control plane, lease renewers, peers) on the other: the
  server gets the same CPU in every scenario, and the drainers' cost cannot steal from it.
- **Capacity**: first, the ideal drainer (bench/fleet_ideal.py: no client rate limit, exact PDB
  pacing from the watched status) drains ``--probe-nodes`` nodes; its evictions/s is the server's
  capacity on this machine, the limit the agents are held to, and sizes the scenarios. The same
  probe runs again after the last scenario ("ideal probe (end)"): the server's capacity is not a
  constant over a run (four runs of round 11 and 12 measured 113.9 to 164.6 at the start), so
  every goodput is also given against both probes (``goodput_over_capacity_range``).
- **Scenarios** by overload factor (bench/fleet_plan.py): for each deadline (30 s, 120 s) and
  factor (1, 2, 4), as many nodes as make ``nodes x 30 / deadline = factor x capacity``; every
  notice in the same second; every node drained by the agent's own ``DrainRunner`` under its node
  identity, the agents spread over ``--agent-processes`` worker processes (bench/fleet_agents.py).
- **Peers** on the agents' smallest scenario (same nodes, same deadline, until all empty or twice
  the deadline): a central drainer at client-go defaults (5 QPS, burst 10) and at 50 QPS (burst
  100), as a service account (APF's workload-low, as a controller is), and ``kubectl drain`` x N
  (each as its node).

"Empty" and "out" are seen by one observer for every drainer (a watch of every pod). Requests and
429s are the API server's own counts (``apiserver_request_total``) less the control plane's and
the leases', and the agents' own count; CPU is per process (psutil); the load the run ran under
(load average, what other processes used of each core) is in every row. The last line is one
JSON object (bench/fleet_plan.py ``headline``); the exit status is non-zero only when a scenario
could not run to its end.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from bench.drain import REPO
from bench.fleet_agents import AgentGroups, Hall
from bench.fleet_cluster import ControlPlaneProcess, PodCache, PodInformer, mean_turns, parallel
from bench.fleet_ideal import IdealDrainer
from bench.fleet_lease import RENEW_S, LeaseRenewers, summary
from bench.fleet_peers import CentralDrainer, kubectl_drains
from bench.fleet_plan import PODS_PER_NODE, PROBE, Scenario, after_probe, exit_status, headline, overload, plan, probe
from bench.fleet_report import CpuMeter, line, percentile
from common.http import TlsFiles, tls_context
from tests.emulators.kube_fixture import kubectl as run_kubectl
from tests.rigs.kube_real_fixture import cached_binary
from tests.rigs.kube_real_objects import KubeClient, create_node, create_pdb, create_running_pod, ensure_namespace
from tests.rigs.kube_real_rig import RealApiServer
from tests.support.wait import wait_for

PODS, PDBS = PODS_PER_NODE, 3
FILL_WORKERS = 16
_METRIC = re.compile(r'^apiserver_request_total\{([^}]*)\} (\S+)$', re.MULTILINE)
_REJECTED = re.compile(r'^apiserver_flowcontrol_rejected_requests_total\{([^}]*)\} (\S+)$', re.MULTILINE)


def node_name(i: int) -> str:
    return f"n-{i:04d}"


def namespace(i: int) -> str:
    return f"fleet-{i:04d}"


class Fleet:
    """The cluster: a pool of nodes (the first N of it drained by each scenario, reset between),
    their namespaces and PDBs, created as the scenarios need them."""

    def __init__(self, server: RealApiServer, base: Path) -> None:
        self.server, self.base = server, base
        self.admin = server.client()
        self.tls = tls_context(TlsFiles(ca_file=str(server.ca_file)))
        self.cache_dir = base / "kcache"
        self.made = 0

    def kubectl(self, *args: str) -> None:
        assert self.server.admin is not None
        proc = run_kubectl(self.server.admin.kubeconfig, self.cache_dir, *args, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])} exited {proc.returncode}: {proc.stderr[-800:]}")

    def setup(self) -> None:
        self.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/rbac.yaml"))
        self.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/flowschema-v1beta1.yaml"))
        self.taint_token = self._token("sco-system", "sco-agent")
        # The central peer runs as a controller does: a service account (the built-in
        # service-accounts FlowSchema puts it in workload-low), not system:masters (exempt from APF).
        for path, obj in (("/api/v1/namespaces/sco-system/serviceaccounts",
                           {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "central-drainer"}}),
                          ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
                              "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                              "metadata": {"name": "central-drainer"},
                              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                          "name": "cluster-admin"},
                              "subjects": [{"kind": "ServiceAccount", "name": "central-drainer",
                                            "namespace": "sco-system"}]})):
            self.admin.must("POST", path, obj)
        self.central_token = self._token("sco-system", "central-drainer")
        self.kubectl("get", "nodes", "-o", "name")   # kubectl's discovery cache, warm for every kubectl

    def _token(self, ns: str, sa: str) -> str:
        doc = self.admin.must("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 7200}})
        return str(doc["status"]["token"])

    def ensure(self, n: int) -> None:
        """Nodes, namespaces and PDBs 0..n-1 exist."""
        todo = list(range(self.made, n))
        if not todo:
            return
        parallel(lambda c, i: create_node(c, node_name(i)), todo, FILL_WORKERS, self.server.client)
        parallel(self._namespace, todo, FILL_WORKERS, self.server.client)
        self.made = n

    @staticmethod
    def _namespace(client: KubeClient, i: int) -> None:
        ensure_namespace(client, namespace(i))
        for k in range(PDBS):
            create_pdb(client, namespace(i), f"app-{k}", {"app": f"app-{k}"}, max_unavailable="50%")

    def fill(self, n: int) -> None:
        jobs = [(i, j) for i in range(n) for j in range(PODS)]

        def one(client: KubeClient, job: tuple[int, int]) -> None:
            i, j = job
            create_running_pod(client, namespace(i), f"{node_name(i)}-{j:02d}", node_name(i),
                               labels={"app": f"app-{j % PDBS}"})
        parallel(one, jobs, FILL_WORKERS, self.server.client)

    def reset_nodes(self, n: int) -> None:
        """Every drained node as new (uncordoned, untainted, unannotated): deleted and created again."""
        def one(client: KubeClient, i: int) -> None:
            client.request("DELETE", f"/api/v1/nodes/{node_name(i)}")
            create_node(client, node_name(i))
        parallel(one, range(n), FILL_WORKERS, self.server.client)

    def pdbs_ready(self, n: int) -> bool:
        items = self.admin.must("GET", "/apis/policy/v1beta1/poddisruptionbudgets")["items"]
        want = {namespace(i) for i in range(n)}
        return all(p.get("status", {}).get("disruptionsAllowed", 0) == PODS // PDBS // 2 for p in items
                   if p["metadata"]["namespace"] in want)

    def metrics(self) -> tuple[float, float, dict[str, float]]:
        """(requests, 429s, APF rejections by priority level) so far."""
        text = self.admin.request("GET", "/metrics").text
        total = throttled = 0.0
        for labels, value in _METRIC.findall(text):
            total += float(value)
            if 'code="429"' in labels:
                throttled += float(value)
        rejected: dict[str, float] = {}
        for labels, value in _REJECTED.findall(text):
            level = re.search(r'priority_level="([^"]*)"', labels)
            key = level.group(1) if level else "?"
            rejected[key] = rejected.get(key, 0.0) + float(value)
        return total, throttled, rejected

    def tokens(self, n: int) -> dict[str, str]:
        return {node_name(i): self.server.nodes[node_name(i)].token for i in range(n)}


def pin(server: RealApiServer, server_cpus: str) -> None:
    """kube-apiserver and etcd, every thread of each (``-a``), to ``server_cpus``."""
    for name in ("etcd", "kube-apiserver"):
        subprocess.run(["taskset", "-a", "-cp", server_cpus, str(server.pids[name])], check=True,
                       stdout=subprocess.DEVNULL)


def cpu_list(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


class LoadMeter:
    """What else ran during a scenario: load average, and each core group's busy seconds less
    what the run's own processes on it used (other sessions on a shared box)."""

    def __init__(self, server_cpus: set[int], server_pids: list[int]) -> None:
        self._cores, self._pids = frozenset(server_cpus), server_pids

    def _busy(self) -> tuple[float, float]:
        """Busy CPU seconds so far of the server's cores, and of the others."""
        on = [sum(t) - t.idle - getattr(t, "iowait", 0.0) for t in psutil.cpu_times(percpu=True)]
        return (sum(b for c, b in enumerate(on) if c in self._cores),
                sum(b for c, b in enumerate(on) if c not in self._cores))

    def sample(self) -> dict[str, float]:
        busy = self._busy()[0]
        own = sum(sum(psutil.Process(p).cpu_times()[:2]) for p in self._pids)
        # steal: time the hypervisor ran someone else on the server's cores while they had work
        # (a slower host shows up as more CPU per request, not here; this is the part it admits).
        steal = sum(getattr(t, "steal", 0.0) for c, t in enumerate(psutil.cpu_times(percpu=True)) if c in self._cores)
        return {"t": time.monotonic(), "server_cores_busy": busy, "server_own": own, "load1": os.getloadavg()[0],
                "server_steal": steal}

    def window(self, seconds: float) -> Callable[[], dict[str, float | None]]:
        """Each core group's busy share over the next ``seconds`` (the deadline's window, where the
        goodput is counted): sampled by a thread at its start and end; the returned call gives it once
        that end has come (None before). Says which core was full while the pods had to go out."""
        cores = len(self._cores)
        got: dict[str, float | None] = {"server_cores_busy": None, "other_cores_busy": None}
        t0, (server0, other0) = time.monotonic(), self._busy()
        others = max(1, (psutil.cpu_count() or 1) - cores)

        def sample() -> None:
            time.sleep(seconds)
            server, other = self._busy()
            wall = time.monotonic() - t0
            got.update(server_cores_busy=round((server - server0) / wall / max(1, cores), 3),
                       other_cores_busy=round((other - other0) / wall / others, 3))

        threading.Thread(target=sample, name="window-meter", daemon=True).start()
        return lambda: dict(got)

    @staticmethod
    def since(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
        wall = after["t"] - before["t"]
        busy = after["server_cores_busy"] - before["server_cores_busy"]
        own = after["server_own"] - before["server_own"]
        return {"wall_s": round(wall, 1), "loadavg_1m_start": round(before["load1"], 2),
                "loadavg_1m_end": round(after["load1"], 2), "server_core_busy_s": round(busy, 1),
                "server_core_others_s": round(max(0.0, busy - own), 1),
                "server_core_steal_s": round(after.get("server_steal", 0.0) - before.get("server_steal", 0.0), 1)}


def run_scenario(fleet: Fleet, cache: PodCache, plane: ControlPlaneProcess, meter: CpuMeter,
                 load: LoadMeter, sc: Scenario, capacity: float | None, agent_processes: int,
                 ideal_per_pdb: int | None = None) -> dict[str, Any]:
    """One scenario: fill its nodes, start the leases, start every drain within the same second, run
    until every node is empty, the drainer ended, or the cap; then clean up for the next."""
    n = sc.nodes
    nodes = [node_name(i) for i in range(n)]
    fleet.ensure(n)
    t_fill = time.time()
    fleet.fill(n)
    wait_for(lambda: fleet.pdbs_ready(n), 600, "every PDB's status written")
    wait_for(lambda: all(cache.count(x) == PODS for x in nodes), 300, "the observer sees every pod")
    fill_s = time.time() - t_fill
    leases = LeaseRenewers(fleet.server.url, str(fleet.server.ca_file), fleet.tokens(n)).start()
    time.sleep(RENEW_S)   # every kubelet has renewed once (the first creates its Lease) before the notices
    cache.watch_nodes(nodes)
    requests0, throttled0, rejected0 = fleet.metrics()
    plane_requests0, turns0 = plane.requests, plane.turns()
    groups = ideal = central = None
    if sc.drainer == "agents":   # spawned and imported before anyone's notice
        hall = Hall(fleet.server.url, str(fleet.server.ca_file), fleet.taint_token, fleet.tokens(n), sc.deadline_s)
        groups = AgentGroups(hall, nodes, agent_processes).prepare()
    elif sc.drainer == "ideal":
        assert fleet.server.admin is not None
        ideal = IdealDrainer(fleet.server.url, str(fleet.server.ca_file), fleet.server.admin.token, fleet.tokens(n),
                             cache.in_namespaces(namespace(i) for i in range(n)),
                             lambda p: str(p["metadata"]["labels"]["app"]), per_pdb=ideal_per_pdb)
    lease_proc = psutil.Process(leases.pid)
    cpu_before, load_before, lease_cpu0 = meter.sample(), load.sample(), sum(lease_proc.cpu_times()[:2])
    t0 = time.time()
    stop_at = t0 + sc.cap_s
    in_window = load.window(sc.deadline_s)
    if groups is not None:
        groups.start(t0)
    elif ideal is not None:
        ideal.start()
    elif sc.drainer in ("central", "central50"):
        qps, burst = (5.0, 10) if sc.drainer == "central" else (50.0, 100)
        central = CentralDrainer(fleet.server.url, fleet.central_token, fleet.tls, nodes, stop_at,
                                 qps=qps, burst=burst).start()
    if sc.drainer == "kubectl":
        kubectl_drains(nodes, lambda x: fleet.server.nodes[x].kubeconfig, fleet.cache_dir, int(sc.cap_s),
                       stop_at, until=lambda: len(cache.empty_at) == n)
    else:
        wait_for(lambda: len(cache.empty_at) == n or time.time() >= stop_at
                 or (groups is not None and not groups.alive()), sc.cap_s + 60,
                 "every node empty, the cap, or every agent ended")
    ended = time.time()
    counts: dict[str, list[int]] = {}
    cordoned: dict[str, float] = {}
    agent_cpu = None
    by_role: dict[str, float] = {}
    if groups is not None:
        counts, by_role, cordoned, agent_cpu = groups.stop()
    lease_cpu = sum(lease_proc.cpu_times()[:2]) - lease_cpu0
    cpu = meter.since(cpu_before)
    cpu["lease_renewers"] = round(lease_cpu, 1)    # a process of the run, not someone else's
    cpu["others_on_machine"] = round(max(0.0, cpu["others_on_machine"] - lease_cpu), 1)
    load_row = LoadMeter.since(load_before, load.sample())
    if ideal is not None:
        ideal.stop()
    if central is not None:
        central.stop()
    attempts = leases.stop()
    requests1, throttled1, rejected1 = fleet.metrics()
    empty = {x: cache.empty_at[x] - t0 for x in nodes if x in cache.empty_at}
    times = [empty.get(x, float("inf")) for x in nodes]
    gone_times = [t - t0 for t in list(cache.gone_at)]
    gone = len(gone_times)
    pods = n * PODS
    out_by_deadline = sum(1 for t in gone_times if t <= sc.deadline_s)
    drain_all = max(times) if len(empty) == n else None
    window = drain_all if drain_all is not None else ended - t0
    lease_ids = len(attempts)
    # The server's count, less what the control plane and the lease renewers sent, and the scrapes.
    server_requests = requests1 - requests0 - (plane.requests - plane_requests0) - lease_ids - 1
    apf = {k: int(v - rejected0.get(k, 0.0)) for k, v in rejected1.items() if v - rejected0.get(k, 0.0) > 0}
    row: dict[str, Any] = {
        "label": sc.label, "drainer": sc.drainer, "nodes": n, "pods": pods, "deadline_s": sc.deadline_s,
        "factor_asked": sc.factor, "factor": round(overload(n, sc.deadline_s, capacity), 2) if capacity else None,
        "fill_s": round(fill_s, 1), "share_on_time": round(sum(1 for t in times if t <= sc.deadline_s) / n, 4),
        "pods_out_by_deadline": out_by_deadline, "pods_out_by_deadline_share": round(out_by_deadline / pods, 4),
        "p50_s": percentile(times, 0.50), "p99_s": percentile(times, 0.99),
        "time_to_drain_all_s": None if drain_all is None else round(drain_all, 2),
        "ran_s": round(window, 2), "cap_s": sc.cap_s, "empty_by_end": len(empty), "pods_out": gone,
        "evictions_per_s": round(gone / window, 1) if window > 0 else None,
        "server_requests": int(server_requests), "http_429": int(throttled1 - throttled0), "apf_rejected": apf,
        "lease": summary(attempts, t0, ended), "cpu_s": cpu, "load": load_row,
        "control_plane": mean_turns(turns0, plane.turns()),
        "deadline_window_busy": in_window(),
        "completed": True,
    }
    if counts:   # the agents' own count, exact
        sent = sum(len(v) for v in counts.values())
        refused = sum(v.count(429) for v in counts.values())
        apf_agents = apf.get("sco-agent", 0)
        row.update(requests_per_pod=round(sent / gone, 2) if gone else None, agent_requests=sent,
                   refusals={"http_429": refused, "apf": apf_agents, "pdb": max(0, refused - apf_agents)},
                   agent_cpu_s=agent_cpu, agent_cpu_s_per_pod=round(agent_cpu / gone, 4) if gone and agent_cpu else None,
                   agent_threads_cpu_s=by_role,
                   agent_requests_by_kind=dict(sorted(groups.by_kind.items(), key=lambda kv: -kv[1])) if groups else {},
                   notice_to_cordon_p99_ms=percentile([1000 * (cordoned.get(x, float("inf")) - t0) for x in nodes], 0.99),
                   notice_to_cordon_p50_ms=percentile([1000 * (cordoned.get(x, float("inf")) - t0) for x in nodes], 0.5),
                   cordoned=len(cordoned))
        row["completed"] = len(counts) == n    # every worker reported every node
    else:   # the drainer's own count where it keeps one; kubectl's is the server's (it holds background)
        own = ideal.requests if ideal is not None else central.requests if central is not None else None
        row.update(requests_per_pod=round((own if own is not None else server_requests) / gone, 2) if gone else None,
                   requests_counted_by="drainer" if own is not None else "server",
                   refusals={"http_429": int(throttled1 - throttled0), "apf": sum(apf.values()),
                             "pdb": max(0, int(throttled1 - throttled0) - sum(apf.values()))})
    if ideal is not None:
        row["ideal_requests"] = ideal.requests
        row["ideal_pdb_refusals"] = ideal.pacer.refused
        row["completed"] = drain_all is not None    # the capacity is only a capacity if it drained all
    if central is not None:
        row["central_requests"] = central.requests
    clean(fleet, cache, n)
    return row


def clean(fleet: Fleet, cache: PodCache, n: int) -> None:
    """Whatever a drainer left goes at once (grace period 0: straight out of etcd), and the nodes
    are reset, before the next scenario."""
    nodes = [node_name(i) for i in range(n)]
    left = [i for i, x in enumerate(nodes) if cache.count(x)]

    def wipe(client: KubeClient, i: int) -> None:
        client.request("DELETE", f"/api/v1/namespaces/{namespace(i)}/pods?gracePeriodSeconds=0")
    parallel(wipe, left, FILL_WORKERS, fleet.server.client)
    wait_for(lambda: all(cache.count(x) == 0 for x in nodes), 600, "leftover pods gone")
    fleet.reset_nodes(n)


Serving = tuple[Fleet, PodCache, ControlPlaneProcess, CpuMeter, LoadMeter]


@contextmanager
def serving(pool: int, server_cpus: str | None) -> Iterator[Serving]:
    """The cluster a run drains: kube-apiserver and etcd (pinned to ``server_cpus``; None: not
    pinned) with ``pool`` nodes, the observer's pod informer and the fake control plane, and the
    meters of a scenario's CPU and load. The caller has pinned itself to the other cores."""
    binary = cached_binary()
    if not binary.exists():
        raise SystemExit(f"{binary} missing: run tests/rigs/kube_real/build.sh first")
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        base = Path(tmp)
        with RealApiServer(base / "real", binary, node_names=tuple(node_name(i) for i in range(pool))) as server:
            if server_cpus is not None:
                pin(server, server_cpus)
            fleet = Fleet(server, base)
            fleet.setup()
            cache = PodCache()
            informer = PodInformer(server, cache).start()
            try:
                with ControlPlaneProcess(server) as plane:
                    meter = CpuMeter({**{x: server.pids[x] for x in ("kube-apiserver", "etcd")},
                                      "control_plane": plane.pid}, informer.thread)
                    cores = cpu_list(server_cpus) if server_cpus is not None else set(range(psutil.cpu_count() or 1))
                    load = LoadMeter(cores, [server.pids["kube-apiserver"], server.pids["etcd"]])
                    yield fleet, cache, plane, meter, load
            finally:
                informer.stop()
            if plane.errors:
                print(f"fake control plane: {plane.errors} unexpected answers", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet")
    parser.add_argument("--quick", action="store_true", default=os.environ.get("FLEET_QUICK") == "1",
                        help="a short run for development (FLEET_QUICK=1): deadline 30 s, factors 1 and 2, "
                             "20 probe nodes, the central peer at 50 QPS only")
    parser.add_argument("--deadlines", default=None, help="comma-separated seconds (default 30,120)")
    parser.add_argument("--factors", default=None, help="overload factors (default 1,2,4)")
    parser.add_argument("--peers", default=None, help="central,central50,kubectl (default all; '' for none)")
    parser.add_argument("--probe-nodes", type=int, default=None, help="nodes the ideal drainer drains (default 100)")
    parser.add_argument("--capacity", type=float, default=None, help="skip the probe: this many evictions/s")
    parser.add_argument("--ideal-per-pdb", type=int, default=1,
                        help="the ideal drainer keeps at most this many evictions of one PDB in flight (0: as many as its room; "
                             "5 at once cost the server twice the CPU per pod, measured)")
    parser.add_argument("--max-nodes", type=int, default=1000, help="no scenario larger (its factor is then lower)")
    parser.add_argument("--agent-processes", type=int, default=4)
    parser.add_argument("--server-cpus", default="0", help="the cores of kube-apiserver and etcd (taskset list)")
    parser.add_argument("--other-cpus", default="1", help="the cores of everything else")
    parser.add_argument("--no-pin", action="store_true", help="no taskset (every process on every core)")
    args = parser.parse_args(argv)
    deadlines = [float(x) for x in (args.deadlines or ("30" if args.quick else "30,120")).split(",")]
    factors = [float(x) for x in (args.factors or ("1,2" if args.quick else "1,2,4")).split(",")]
    peers_arg = args.peers if args.peers is not None else ("central50" if args.quick else "central,central50,kubectl")
    peers = [p for p in peers_arg.split(",") if p]
    probe_nodes = args.probe_nodes or (20 if args.quick else 100)
    if not args.no_pin:   # before any thread or child: all of them inherit it
        os.sched_setaffinity(0, cpu_list(args.other_cpus))
    rows: list[dict[str, Any]] = []
    asked: list[Scenario] = []
    capacity = args.capacity
    with serving(max(args.max_nodes, probe_nodes), None if args.no_pin else args.server_cpus) as (fleet, cache, plane, meter, load):
        todo: list[Scenario] = []
        if capacity is None:
            todo.append(probe(probe_nodes))
        planned = False
        while todo or not planned:
            if not todo:   # the probe is done (or skipped): the scenarios, sized by it
                planned = True
                if capacity:
                    scenarios = plan(capacity, deadlines, factors, peers, args.max_nodes, peer_cap_factor=2.0)
                    todo = after_probe(scenarios, probe_nodes, probed=args.capacity is None)
                    asked.extend(todo)
                continue
            sc = todo.pop(0)
            if sc.label == PROBE:
                asked.append(sc)
            try:
                row = run_scenario(fleet, cache, plane, meter, load, sc, capacity, args.agent_processes,
                                   args.ideal_per_pdb or None)
            except Exception as e:  # noqa: BLE001 -- whatever broke a scenario, the run goes on and the exit status says it
                row = {"label": sc.label, "drainer": sc.drainer, "nodes": sc.nodes,
                       "error": f"{type(e).__name__}: {e}"[:500]}
                print(f"{sc.label}: {row['error']}", file=sys.stderr, flush=True)
            rows.append(row)
            if sc.label == PROBE and not row.get("error"):
                capacity = row["evictions_per_s"] if row["completed"] else None
            if not row.get("error"):
                print(line(row), flush=True)
    print(json.dumps({"bench": "fleet", "pods_per_node": PODS, "deadlines_s": deadlines, "factors": factors,
                      "pinned": None if args.no_pin else {"server": args.server_cpus, "others": args.other_cpus},
                      **headline(rows, capacity), "results": rows}))
    return exit_status(asked, rows, capacity)


if __name__ == "__main__":
    sys.exit(main())
