"""Benchmark: what the agent's Kubernetes drain costs the agent -- threads and CPU per drained pod.

Run from the repository root with ``python -m bench.drain_cost`` (no argument needed).

Several drains run at once in this process, each the agent's own ``DrainRunner`` for its own
node, against the Kubernetes API-server emulator (tests/emulators/kube) running in a process of
its own, so this process's CPU (``resource.getrusage(RUSAGE_SELF)``: user + system, every
thread) is the agents' alone. Each node holds ``--pods`` running pods spread over
``--namespaces`` namespaces, under ``--pdbs`` PDBs (``maxUnavailable: 50%``), so every drain has
several PDB watches and paces its evictions by them. ``--rounds`` rounds, each on fresh nodes;
the figures are the median round's.

Reported per round: the threads of this process at their peak during the drains, less those
before (``threads_per_drain``: that over the drains), the CPU seconds of this process over the
pods drained (less the sampler's own thread), the agents' requests per pod (every request
``KubeApi.on_request`` saw, evictions and 429s apart), and the wall time to drain all. The
last line is one JSON object with the headline figures.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.wire import Budget, phase_ends
from executor.kube.api import KubeApi
from executor.kube.drain_spec import DrainSpec
from executor.kube.runner import DrainRunner
from executor.scheduler import NewState, Report

TIMEOUT_S = 300.0
SAMPLE_S = 0.05


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class ThreadPeak:
    """The most threads this process had at once (sampled every SAMPLE_S), and the sampler's own CPU."""

    def __init__(self) -> None:
        self.peak = 0
        self.own_cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def start(self) -> ThreadPeak:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.peak = max(self.peak, threading.active_count())
        self.own_cpu_s = time.thread_time()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def fill(kube: Any, node: str, tag: str, pods: int, pdbs: int, namespaces: int) -> None:
    from tests.emulators.kube import objects

    spaces = [f"{tag}-{k}" for k in range(namespaces)]
    manifests = [objects.node(node)] + [objects.namespace(ns) for ns in spaces]
    manifests += [objects.pdb(f"web-{j}", {"app": f"web-{j}"}, namespace=spaces[j % namespaces],
                              max_unavailable="50%") for j in range(pdbs)]
    manifests += [objects.pod(f"p-{i:03d}", node, namespace=spaces[(i % pdbs) % namespaces],
                              labels={"app": f"web-{i % pdbs}"}) for i in range(pods)]
    kube.seed(*manifests)


def spec_for(node: str) -> DrainSpec:
    now = time.time()
    return DrainSpec(notice_id=f"cost-{node}", kind="reclaim", deadline=now + 600,
                     deadline_text="2030-01-01T00:00:00Z", received_at=now,
                     ends=phase_ends(now, now + 600, Budget(595, 0, 590, 5)), taint_key="sco.io/notice",
                     cordon_only=False, pdb_blocked="report", exclude_from_lb=False, down_after_s=10.0)


def agent_api(kube: Any, node: str, requests: list[tuple[str, str, int]]) -> Callable[[], KubeApi]:
    def make() -> KubeApi:
        api = KubeApi(kube.url, node, kube.token, timeout_s=10.0)
        api.on_request = lambda method, path, status: requests.append((method, path, status))
        return api
    return make


def one_round(kube: Any, r: int, drains: int, pods: int, pdbs: int, namespaces: int) -> dict[str, Any]:
    nodes = [f"cost-{r}-{d}" for d in range(drains)]
    for d, node in enumerate(nodes):
        fill(kube, node, f"c{r}x{d}", pods, pdbs, namespaces)
    requests: list[tuple[str, str, int]] = []
    reports: list[Report] = []
    sampler = ThreadPeak().start()
    before_threads = threading.active_count()
    cpu0, t0 = cpu_s(), time.perf_counter()
    runners = [DrainRunner(spec_for(node), agent_api(kube, node, requests), reports.append).start() for node in nodes]
    deadline = time.monotonic() + TIMEOUT_S
    while sum(isinstance(x, NewState) for x in list(reports)) < drains:
        if time.monotonic() > deadline:
            raise RuntimeError(f"round {r}: not every drain ended in {TIMEOUT_S} s")
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    for runner in runners:
        runner.stop()
    for runner in runners:
        runner.join(10)
    cpu = cpu_s() - cpu0
    sampler.stop()
    states = sorted({x.state for x in reports if isinstance(x, NewState)})
    if states != ["done"]:
        raise RuntimeError(f"round {r}: drains ended {states}")
    left = sum(len(kube.pods(node)) for node in nodes)
    if left:
        raise RuntimeError(f"round {r}: {left} pods left on the nodes")
    drained = drains * pods
    evictions = sum(1 for _, path, _ in requests if path.endswith("/eviction"))
    threads = sampler.peak - before_threads
    return {"round": r, "wall_s": round(wall, 2), "threads_peak": threads,
            "threads_per_drain": round(threads / drains, 2),
            "agent_cpu_s": round(cpu - sampler.own_cpu_s, 3),
            "agent_cpu_s_per_pod": round((cpu - sampler.own_cpu_s) / drained, 5),
            "requests_per_pod": round(len(requests) / drained, 2),
            "evictions_per_pod": round(evictions / drained, 2),
            "http_429": sum(1 for _, _, status in requests if status == 429)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_cost")
    parser.add_argument("--drains", type=int, default=8, help="drains at once, one node each (default 8)")
    parser.add_argument("--pods", type=int, default=60, help="pods per node (default 60)")
    parser.add_argument("--pdbs", type=int, default=6, help="PDBs per node, maxUnavailable 50%% (default 6)")
    parser.add_argument("--namespaces", type=int, default=3, help="namespaces per node (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds on fresh nodes; the median is reported")
    args = parser.parse_args(argv)
    from tests.emulators.kube_fixture import kube_emulator

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-drain-cost-") as tmp, \
            kube_emulator(Path(tmp), grace_cap=0.2, replicasets=False) as kube:
        for r in range(args.rounds):
            row = one_round(kube, r, args.drains, args.pods, args.pdbs, args.namespaces)
            print(f"round {r}: {args.drains} drains x {args.pods} pods in {row['wall_s']} s; threads +"
                  f"{row['threads_peak']} ({row['threads_per_drain']} a drain); agent CPU {row['agent_cpu_s']} s "
                  f"({row['agent_cpu_s_per_pod'] * 1000:.2f} ms a pod); {row['requests_per_pod']} requests a pod "
                  f"({row['evictions_per_pod']} evictions); 429s {row['http_429']}", flush=True)
            rows.append(row)
    median = sorted(rows, key=lambda x: x["agent_cpu_s_per_pod"])[len(rows) // 2]
    print(json.dumps({"bench": "drain_cost", "drains": args.drains, "pods_per_drain": args.pods,
                      "pdbs_per_drain": args.pdbs, "namespaces_per_drain": args.namespaces, "rounds": args.rounds,
                      "agent_cpu_s_per_pod": median["agent_cpu_s_per_pod"],
                      "agent_cpu_s_per_pod_all": [x["agent_cpu_s_per_pod"] for x in rows],
                      "threads_per_drain": statistics.median(x["threads_per_drain"] for x in rows),
                      "threads_peak": max(x["threads_peak"] for x in rows),
                      "requests_per_pod": median["requests_per_pod"], "evictions_per_pod": median["evictions_per_pod"],
                      "http_429": sum(x["http_429"] for x in rows), "wall_s": median["wall_s"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
