"""Benchmark: the agent's Kubernetes drain against `kubectl drain`, on the same server in the same run.

Run from the repository root with ``python -m bench.drain [--tier emulator|real|both]``.

For each case -- 110 pods under 11 PDBs (10 each), under 1 PDB, under none -- a fresh node
is filled with 110 running pods and drained twice over (a fresh node and namespace each
time): once by the agent's drain code driven directly (``DrainRunner``: cordon and taint,
PDB-aware evictions, wait until the node is empty) and once by the venv's real ``kubectl
drain --ignore-daemonsets --delete-emptydir-data --force``. Both are timed from start to
node empty. The PDBs allow ``--max-unavailable`` (default 50%) of their pods at once, so
they really pace the drain.

Tiers: ``emulator`` (tests/emulators/kube, its simulated kubelet ends a pod 0.2 s after the
eviction) and ``real`` (kube-apiserver v1.20.2 + etcd with TLS, the agent as the node
identity ``system:node:<name>`` with deploy/kubernetes/rbac.yaml and the sco-agent
service-account token for the taint; a fake kubelet and disruption controller polling every
0.2 s). The last line printed is one JSON object with every figure; goal: agent / kubectl
wall-time ratio <= 0.5 in every case.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common.http import TlsFiles
from common.wire import Budget, phase_ends
from executor.kube.api import KubeApi
from executor.kube.drain_spec import DrainSpec
from executor.kube.runner import DrainRunner
from executor.scheduler import NewState, Report
from tests.emulators.kube_fixture import kubectl as run_kubectl
from tests.rigs.kube_real_fixture import cached_binary
from tests.support.wait import wait_for

REPO = Path(__file__).resolve().parents[1]
CASES = (("11 PDBs", 11), ("1 PDB", 1), ("no PDB", 0))
TOOLS = ("agent", "kubectl")
GOAL = 0.5
TIMEOUT_S = 300.0


class Cluster:
    """What a tier offers the bench: fill a node, drain it both ways, tell when it is empty."""

    kubeconfig: Path
    cache_dir: Path

    def node_name(self, case: int, tool: str) -> str:
        return f"bench-{case}-{tool}"

    def fill(self, node: str, ns: str, pods: int, pdbs: int, max_unavailable: str) -> None:
        raise NotImplementedError

    def agent_api(self, node: str) -> Callable[[], KubeApi]:
        raise NotImplementedError

    def pods_on(self, node: str) -> int:
        raise NotImplementedError


def pod_labels(i: int, pdbs: int) -> dict[str, str]:
    return {"app": f"web-{i % pdbs}"} if pdbs else {"app": "solo"}


# -- tiers -------------------------------------------------------------------------------------
class EmulatorCluster(Cluster):
    def __init__(self, kube: Any) -> None:
        self.kube = kube
        self.kubeconfig = kube.kubeconfig
        self.cache_dir = kube.cache_dir

    def fill(self, node: str, ns: str, pods: int, pdbs: int, max_unavailable: str) -> None:
        from tests.emulators.kube import objects

        manifests = [objects.node(node), objects.namespace(ns)]
        manifests += [objects.pdb(f"web-{j}", {"app": f"web-{j}"}, namespace=ns, max_unavailable=max_unavailable)
                      for j in range(pdbs)]
        manifests += [objects.pod(f"p-{i:03d}", node, namespace=ns, labels=pod_labels(i, pdbs)) for i in range(pods)]
        self.kube.seed(*manifests)

    def agent_api(self, node: str) -> Callable[[], KubeApi]:
        return lambda: KubeApi(self.kube.url, node, self.kube.token, timeout_s=10.0)

    def pods_on(self, node: str) -> int:
        return len(self.kube.pods(node))


class RealCluster(Cluster):
    def __init__(self, server: Any, base: Path) -> None:
        from tests.rigs.kube_real_objects import create_node

        self.server = server
        self.kubeconfig = server.admin.kubeconfig
        self.cache_dir = base / "kcache"
        self.admin = server.client()
        for name in server.node_names:
            create_node(self.admin, name)
        kubectl(self, "apply", "-f", str(REPO / "deploy/kubernetes/rbac.yaml"))
        doc = self.admin.must("POST", "/api/v1/namespaces/sco-system/serviceaccounts/sco-agent/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
        self.taint_token = doc["status"]["token"]

    def fill(self, node: str, ns: str, pods: int, pdbs: int, max_unavailable: str) -> None:
        from tests.rigs.kube_real_objects import create_pdb, create_running_pod, ensure_namespace

        ensure_namespace(self.admin, ns)
        for j in range(pdbs):
            create_pdb(self.admin, ns, f"web-{j}", {"app": f"web-{j}"}, max_unavailable=max_unavailable)
        for i in range(pods):
            create_running_pod(self.admin, ns, f"p-{i:03d}", node, labels=pod_labels(i, pdbs))
        if pdbs:   # the fake disruption controller must have written every PDB's status first
            wait_for(lambda: all(p.get("status", {}).get("disruptionsAllowed", 0) > 0 for p in self.admin.must(
                "GET", f"/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets")["items"]), TIMEOUT_S, "PDB status")

    def agent_api(self, node: str) -> Callable[[], KubeApi]:
        s = self.server
        return lambda: KubeApi(s.url, node, s.nodes[node].token, tls=TlsFiles(ca_file=str(s.ca_file)),
                               timeout_s=10.0, node_token=self.taint_token)

    def pods_on(self, node: str) -> int:
        return len(self.admin.must("GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node}"})["items"])


@contextmanager
def emulator_tier(base: Path) -> Iterator[Cluster]:
    from tests.emulators.kube_fixture import kube_emulator

    with kube_emulator(base / "emulator", grace_cap=0.2, replicasets=False) as kube:
        yield EmulatorCluster(kube)


@contextmanager
def real_tier(base: Path) -> Iterator[Cluster]:
    from tests.rigs.kube_real_objects import FakeControlPlane
    from tests.rigs.kube_real_rig import RealApiServer

    binary = cached_binary()
    if not binary.exists():
        raise SystemExit(f"{binary} missing: run tests/rigs/kube_real/build.sh first")
    names = tuple(f"bench-{pdbs}-{tool}" for _, pdbs in CASES for tool in TOOLS)
    with RealApiServer(base / "real", binary, node_names=names) as server:
        cluster = RealCluster(server, base)
        with FakeControlPlane(server.client, nodes=names, interval_s=0.2) as plane:
            yield cluster
        if plane.errors:
            print(f"fake control plane errors: {plane.errors[:3]}", file=sys.stderr)


# -- the two drains ------------------------------------------------------------------------------
def kubectl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run_kubectl(cluster.kubeconfig, cluster.cache_dir, *args, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:2])} exited {proc.returncode}: {proc.stderr[-800:]}")
    return proc


def agent_drain(cluster: Cluster, node: str) -> float:
    now = time.time()
    spec = DrainSpec(notice_id=f"bench-{node}", kind="reclaim", deadline=now + 600, deadline_text="2030-01-01T00:00:00Z",
                     received_at=now, ends=phase_ends(now, now + 600, Budget(595, 0, 590, 5)),
                     taint_key="sco.io/notice", cordon_only=False, pdb_blocked="report", exclude_from_lb=False,
                     down_after_s=10.0)
    reports: list[Report] = []
    t0 = time.perf_counter()
    runner = DrainRunner(spec, cluster.agent_api(node), reports.append).start()
    wait_for(lambda: any(isinstance(r, NewState) for r in list(reports)), TIMEOUT_S, f"agent drain of {node}")
    took = time.perf_counter() - t0
    runner.stop()
    states = [r.state for r in reports if isinstance(r, NewState)]
    if states != ["done"]:
        raise RuntimeError(f"agent drain ended {states}: {reports[-5:]}")
    return took


def kubectl_drain(cluster: Cluster, node: str) -> float:
    t0 = time.perf_counter()
    kubectl(cluster, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=300s")
    return time.perf_counter() - t0


def run_tier(name: str, cluster: Cluster, pods: int, max_unavailable: str) -> list[dict[str, Any]]:
    kubectl(cluster, "get", "nodes")   # warm kubectl's discovery cache: kubectl is timed at its best
    rows = []
    for label, pdbs in CASES:
        row: dict[str, Any] = {"tier": name, "case": label, "pods": pods, "pdbs": pdbs}
        for tool in TOOLS:
            node = cluster.node_name(pdbs, tool)
            cluster.fill(node, f"b-{uuid.uuid4().hex[:8]}", pods, pdbs, max_unavailable)
            took = agent_drain(cluster, node) if tool == "agent" else kubectl_drain(cluster, node)
            left = cluster.pods_on(node)
            if left:
                raise RuntimeError(f"{tool} left {left} pods on {node}")
            row[f"{tool}_s"] = round(took, 3)
        row["ratio"] = round(row["agent_s"] / row["kubectl_s"], 3)
        print(f"{name:>8}  {label:>8}: agent {row['agent_s']:6.2f} s   kubectl drain {row['kubectl_s']:6.2f} s"
              f"   ratio {row['ratio']:.2f}", flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drain")
    parser.add_argument("--tier", choices=("emulator", "real", "both"), default="both")
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--max-unavailable", default="50%", help="each PDB's maxUnavailable (default 50%%)")
    args = parser.parse_args(argv)
    tiers = {"emulator": emulator_tier, "real": real_tier}
    chosen = list(tiers) if args.tier == "both" else [args.tier]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-drain-") as tmp:
        for name in chosen:
            with tiers[name](Path(tmp)) as cluster:
                rows += run_tier(name, cluster, args.pods, args.max_unavailable)
    worst = max(r["ratio"] for r in rows)
    print(json.dumps({"bench": "drain", "pods": args.pods, "max_unavailable": args.max_unavailable,
                      "results": rows, "worst_ratio": worst, "goal": GOAL, "ok": worst <= GOAL}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
