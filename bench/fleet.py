"""Benchmark: a hall-wide reclaim -- N nodes noticed in the same second -- against one real API server.

Run from the repository root: ``python -m bench.fleet [--nodes 200]`` (``--nodes 500`` works on 2 cores).

The cluster (bench/fleet_cluster.py): kube-apiserver v1.20.2 + etcd with TLS (the rig of
tests/rigs), N nodes, 30 running pods each in the node's namespace under 3 PDBs (10 pods each,
maxUnavailable 50 %), the real-server tier's fake kubelet and disruption controller. Every
scenario gets N fresh nodes of its own, filled the same way, and starts every drain within one
second with a 120 s deadline:

- ``agents``: every node drained by the agent's own drain code (``executor.kube.runner.DrainRunner``)
  under its own node identity ``system:node:<name>`` (plus the sco-agent taint token, as deployed),
  many agents in this one process, deploy/kubernetes/flowschema-v1beta1.yaml applied;
- ``central``: one drainer at client-go defaults (5 QPS, burst 10) with 10 workers, as
  aws-node-termination-handler's queue mode (bench/fleet_peers.py);
- ``kubectl``: the venv's real ``kubectl drain`` for every node, all at once, each as its node;
- ``noisy+fs`` / ``noisy-fs``: the agents again next to a loop of cluster-wide consistent LISTs (a
  service account in workload-low), with the FlowSchema, then with it deleted.

"Empty" is seen by one observer for every scenario (the control plane's watch): the moment a
node's last pod is gone. Requests and 429s are the API server's own counts
(``apiserver_request_total`` from /metrics) minus the control plane's and the noisy loop's;
CPU is the API server process's (psutil). The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bench.drain import REPO
from bench.fleet_agents import AgentGroups, Hall
from bench.fleet_cluster import ControlPlaneProcess, PodCache, PodInformer, parallel
from bench.fleet_peers import CentralDrainer, kubectl_drains
from bench.fleet_report import CpuMeter, ThreadRoles, headline, line, percentile
from common.http import TlsFiles, tls_context
from tests.emulators.kube_fixture import kubectl as run_kubectl
from tests.rigs.kube_real_fixture import cached_binary
from tests.rigs.kube_real_objects import KubeClient, create_node, create_pdb, create_running_pod, ensure_namespace
from tests.rigs.kube_real_rig import RealApiServer
from tests.support.wait import wait_for

SCENARIOS = ("agents", "central", "kubectl", "noisy+fs", "noisy-fs")
PODS, PDBS = 30, 3
FILL_WORKERS = 16
NOISY_LOOPS = 4
_METRIC = re.compile(r'^apiserver_request_total\{([^}]*)\} (\S+)$', re.MULTILINE)
_REJECTED = re.compile(r'^apiserver_flowcontrol_rejected_requests_total\{([^}]*)\} (\S+)$', re.MULTILINE)


class Fleet:
    def __init__(self, server: RealApiServer, base: Path, nodes: int) -> None:
        self.server, self.base, self.n = server, base, nodes
        self.admin = server.client()
        self.tls = tls_context(TlsFiles(ca_file=str(server.ca_file)))
        self.cache_dir = base / "kcache"

    def names(self, scenario: int) -> list[str]:
        return [f"s{scenario}-{i:03d}" for i in range(self.n)]

    def kubectl(self, *args: str) -> None:
        assert self.server.admin is not None
        proc = run_kubectl(self.server.admin.kubeconfig, self.cache_dir, *args, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])} exited {proc.returncode}: {proc.stderr[-800:]}")

    def setup(self, scenarios: list[int]) -> None:
        """The nodes of the scenarios that run (each its own), namespaces, PDBs, RBAC, FlowSchema."""
        every = [name for s in scenarios for name in self.names(s)]
        parallel(create_node, every, FILL_WORKERS, self.server.client)
        parallel(self._namespace, range(self.n), FILL_WORKERS, self.server.client)
        self.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/rbac.yaml"))
        self.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/flowschema-v1beta1.yaml"))
        self.taint_token = self._token("sco-system", "sco-agent")
        ensure_namespace(self.admin, "noise")
        for path, obj in (("/api/v1/namespaces/noise/serviceaccounts",
                           {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "lister"}}),
                          ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
                              "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                              "metadata": {"name": "noise-lister"},
                              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                              "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": "noise"}]})):
            self.admin.must("POST", path, obj)
        self.noise_token = self._token("noise", "lister")
        self.kubectl("get", "nodes", "-o", "name")   # kubectl's discovery cache, warm for every kubectl
        # The API server and etcd stand for machines of their own: ahead of the drainers for the CPU.
        for pid in server_pids(self.server):
            psutil.Process(pid).nice(-10)

    def _token(self, ns: str, sa: str) -> str:
        doc = self.admin.must("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 7200}})
        return str(doc["status"]["token"])

    def _namespace(self, client: KubeClient, i: int) -> None:
        ensure_namespace(client, f"fleet-{i:03d}")
        for k in range(PDBS):
            create_pdb(client, f"fleet-{i:03d}", f"app-{k}", {"app": f"app-{k}"}, max_unavailable="50%")

    def fill(self, scenario: int) -> None:
        jobs = [(i, node, j) for i, node in enumerate(self.names(scenario)) for j in range(PODS)]

        def one(client: KubeClient, job: tuple[int, str, int]) -> None:
            i, node, j = job
            create_running_pod(client, f"fleet-{i:03d}", f"{node}-{j:02d}", node, labels={"app": f"app-{j % PDBS}"})
        parallel(one, jobs, FILL_WORKERS, self.server.client)

    def pdbs_ready(self) -> bool:
        items = self.admin.must("GET", "/apis/policy/v1beta1/poddisruptionbudgets")["items"]
        return all(p.get("status", {}).get("disruptionsAllowed", 0) == PODS // PDBS // 2 for p in items
                   if p["metadata"]["namespace"].startswith("fleet-"))

    def metrics(self) -> tuple[float, float, float, dict[str, float]]:
        """(requests, 429s, API server CPU seconds, APF rejections by priority level) so far."""
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
        cpu = psutil.Process(self.server.pids["kube-apiserver"]).cpu_times()
        return total, throttled, cpu.user + cpu.system, rejected

    def hall(self, nodes: list[str], deadline_s: float) -> Hall:
        return Hall(self.server.url, str(self.server.ca_file), self.taint_token,
                    {n: self.server.nodes[n].token for n in nodes}, deadline_s)


def server_pids(server: RealApiServer) -> list[int]:
    return [server.pids[name] for name in ("etcd", "kube-apiserver")]


def noisy(fleet: Fleet, stop: threading.Event, counter: list[int]) -> list[threading.Thread]:
    def loop() -> None:
        client = KubeClient(fleet.server.url, fleet.noise_token, fleet.server.ca_file)
        while not stop.is_set():
            client.request("GET", "/api/v1/pods")
            counter[0] += 1
        client.close()
    threads = [threading.Thread(target=loop, daemon=True) for _ in range(NOISY_LOOPS)]
    for t in threads:
        t.start()
    return threads


class Observer:
    """The bench's eyes: a watch of every pod (PodInformer) in this process; ``requests`` is the
    control plane's count, read from its own process; ``cpu`` meters every part of the run."""

    def __init__(self, cache: PodCache, plane: ControlPlaneProcess, cpu: CpuMeter) -> None:
        self.cache, self._plane, self.cpu = cache, plane, cpu

    @property
    def requests(self) -> int:
        return self._plane.requests


def run_scenario(fleet: Fleet, plane: Observer, index: int, name: str, deadline_s: float,
                 cap_s: float, agent_processes: int) -> dict[str, Any]:
    """One scenario: every drain starts in the same second; it runs until every node is empty or
    ``cap_s`` (the agents themselves give up 30 s past the deadline: runner.LINGER_S)."""
    nodes = fleet.names(index)
    t_fill = time.time()
    fleet.fill(index)
    wait_for(fleet.pdbs_ready, 600, "every PDB's status written")
    wait_for(lambda: all(plane.cache.count(n) == PODS for n in nodes), 120, "the observer sees every pod")
    fill_s = time.time() - t_fill
    if name == "noisy-fs":
        fleet.kubectl("delete", "-f", str(REPO / "deploy/kubernetes/flowschema-v1beta1.yaml"))
    plane.cache.watch_nodes(nodes)
    requests0, throttled0, cpu0, rejected0 = fleet.metrics()
    plane_requests0 = plane.requests
    groups = None
    if name in ("agents", "noisy+fs", "noisy-fs"):   # spawned and imported before anyone's notice
        groups = AgentGroups(fleet.hall(nodes, deadline_s), nodes, agent_processes).prepare()
    cpu_before = plane.cpu.sample()
    roles = ThreadRoles().start()   # the threads started from here on (and the observer's)
    stop_noise, noise = threading.Event(), [0]
    if name.startswith("noisy"):
        noisy(fleet, stop_noise, noise)
    t0 = time.time()
    stop_at = t0 + cap_s
    counts: dict[str, list[int]] = {}
    central = None
    if groups is not None:
        groups.start(t0)
    elif name == "central":
        assert fleet.server.admin is not None
        central = CentralDrainer(fleet.server.url, fleet.server.admin.token, fleet.tls, nodes, stop_at).start()
    if name == "kubectl":
        kubectl_drains(nodes, lambda n: fleet.server.nodes[n].kubeconfig, fleet.cache_dir, int(cap_s),
                       stop_at, until=lambda: len(plane.cache.empty_at) == len(nodes))
    else:
        wait_for(lambda: len(plane.cache.empty_at) == len(nodes) or time.time() >= stop_at
                 or (groups is not None and not groups.alive()), cap_s + 30,
                 "every node empty, the cap, or every agent ended")
    ended = time.time()
    by_role = roles.stop()
    if groups is not None:   # stopped and reaped before the CPU is read: theirs is the bench's children's
        counts, by_role = groups.stop()
    cpu = plane.cpu.since(cpu_before)
    stop_noise.set()
    if central is not None:
        central.stop()
    requests1, throttled1, cpu1, rejected1 = fleet.metrics()
    empty = {n: plane.cache.empty_at[n] - t0 for n in nodes if n in plane.cache.empty_at}
    times = [empty.get(n, float("inf")) for n in nodes]
    on_time = sum(1 for t in times if t <= deadline_s)
    gone = sum(PODS - plane.cache.count(n) for n in nodes)
    drain_all = max(times) if len(empty) == len(nodes) else None
    window = drain_all if drain_all is not None else ended - t0
    # Until every node is empty, or until the drainer stopped (cap, or the agents gave up).
    ran_s = round(drain_all if drain_all is not None else ended - t0, 2)
    # The server's count, less what the control plane, the noisy loop and the two scrapes sent.
    server_requests = requests1 - requests0 - (plane.requests - plane_requests0) - noise[0] - 1
    row = {"scenario": name, "nodes": len(nodes), "pods": len(nodes) * PODS, "fill_s": round(fill_s, 1),
           "share_on_time": round(on_time / len(nodes), 4),
           "p50_s": percentile(times, 0.50), "p99_s": percentile(times, 0.99),
           "time_to_drain_all_s": None if drain_all is None else round(drain_all, 2),
           "finished": drain_all is not None, "ran_s": ran_s, "cap_s": cap_s,
           "empty_by_end": len(empty),
           "evictions_per_s": round(gone / window, 1) if window > 0 else None,
           "server_requests_per_node": round(server_requests / len(nodes), 1),
           "http_429": int(throttled1 - throttled0), "apiserver_cpu_s": round(cpu1 - cpu0, 1), "cpu_s": cpu,
           "drainer_threads_cpu_s": by_role,
           "apf_rejected": {k: int(v - rejected0.get(k, 0.0)) for k, v in rejected1.items()
                            if v - rejected0.get(k, 0.0) > 0}}
    if counts:   # the agents' own count, exact (the server's also holds the noisy loop's)
        per_node = [len(v) for v in counts.values()]
        row["agent_requests_per_node"] = round(sum(per_node) / len(nodes), 1)
        row["agent_requests_max"] = max(per_node)
        row["agent_429s"] = sum(v.count(429) for v in counts.values())
    if central is not None:
        row["central_requests_per_node"] = round(central.requests / len(nodes), 1)
    if noise[0]:
        row["noisy_lists"] = noise[0]
    if name == "noisy-fs":
        fleet.kubectl("apply", "-f", str(REPO / "deploy/kubernetes/flowschema-v1beta1.yaml"))
    clean(fleet, plane, index)
    return row


def clean(fleet: Fleet, plane: Observer, index: int) -> None:
    """Whatever a peer left on its nodes goes (the fake kubelet finishes it), before the next fill."""
    nodes = fleet.names(index)
    left = [i for i, n in enumerate(nodes) if plane.cache.count(n)]

    def wipe(client: KubeClient, i: int) -> None:
        client.request("DELETE", f"/api/v1/namespaces/fleet-{i:03d}/pods")
    parallel(wipe, left, FILL_WORKERS, fleet.server.client)
    wait_for(lambda: all(plane.cache.count(n) == 0 for n in nodes), 600, "leftover pods gone")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--deadline", type=float, default=120.0)
    parser.add_argument("--cap", type=float, default=None,
                        help="run each drainer until every node is empty or this many seconds (default 3x the deadline)")
    parser.add_argument("--agent-processes", type=int, default=1,
                        help="worker processes the agents are spread over (bench/fleet_agents.py); 4 measured no "
                             "better than 1 at 200 nodes: more drainer CPU and more requests per node")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset, in this order")
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if s in args.scenarios.split(",")]
    cap_s = args.cap if args.cap is not None else 3 * args.deadline
    binary = cached_binary()
    if not binary.exists():
        raise SystemExit(f"{binary} missing: run tests/rigs/kube_real/build.sh first")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        base = Path(tmp)
        indices = [SCENARIOS.index(name) for name in chosen]
        names = tuple(f"s{s}-{i:03d}" for s in indices for i in range(args.nodes))
        with RealApiServer(base / "real", binary, node_names=names) as server:
            fleet = Fleet(server, base, args.nodes)
            fleet.setup(indices)
            cache = PodCache()
            informer = PodInformer(server, cache).start()
            with ControlPlaneProcess(server) as plane:
                meter = CpuMeter({**{n: server.pids[n] for n in ("kube-apiserver", "etcd")},
                                  "control_plane": plane.pid}, informer.thread)
                for name in chosen:
                    row = run_scenario(fleet, Observer(cache, plane, meter), SCENARIOS.index(name), name,
                                       args.deadline, cap_s, args.agent_processes)
                    print(line(row), flush=True)
                    rows.append(row)
            informer.stop()
            if plane.errors:
                print(f"fake control plane: {plane.errors} unexpected answers", file=sys.stderr)
    print(json.dumps({"bench": "fleet", "nodes": args.nodes, "pods_per_node": PODS, "deadline_s": args.deadline,
                      "cap_s": cap_s, **headline(rows), "results": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
