"""Benchmark: how far the API server's capacity moves within one bench.fleet run.

Run from the repository root: ``python -m bench.fleet_probes`` (about 9 minutes on 2 cores).

bench.fleet holds the agents to the capacity its ideal drainer measures first, on a fresh server.
Its four full runs of rounds 11 and 12 measured 113.9 to 164.6 evictions/s at that start. This
bench asks the question one step down: on one server, pinned as bench.fleet pins it, does the
same probe give the same figure again and again, and after an agents' scenario, and after the
server has idled? The default sequence is ``p,p,p,a,p,p,p,w120,p,p``:

- ``p``: the ideal drainer on ``--probe-nodes`` nodes (bench.fleet's probe, unchanged);
- ``a`` (or ``aF``): the agents' 30 s scenario at overload factor F (default 1), sized by the
  first probe;
- ``wN``: the server idles N seconds (kube-apiserver compacts etcd every 5 minutes by default).

After each step it prints the size of the server's data directory (etcd's database and WAL) and
kube-apiserver's resident memory, which grow with every pod created and deleted. The last line
is one JSON object: every probe's evictions/s in order, the first one, the spread (highest over
lowest), each probe over the first, and each probe's server CPU per pod (kube-apiserver and etcd),
the hypervisor's steal on the server's core, and the CPU time of a fixed loop on that core just
before the probe (``host_spin_ms``) -- a probe is slower because its core was taken (steal), or
because the same work cost more: the host ran slower (the loop too), or the server's own state
grew (the loop not). The exit status is non-zero only when a step could not run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.fleet import cpu_list, run_scenario, serving
from bench.fleet_plan import nodes_for, plan, pods_per_server_cpu_s, probe
from bench.fleet_report import line

DEFAULT_SEQUENCE = "p,p,p,a,p,p,p,w120,p,p"


@dataclass(frozen=True)
class Step:
    what: str            # probe | agents | wait
    value: float = 0.0   # agents: the overload factor; wait: seconds


def parse_sequence(text: str) -> list[Step]:
    """``p``, ``a``/``aF`` and ``wN``, comma-separated; the first step that runs a drain must be a
    probe (it sizes the agents' scenarios)."""
    steps: list[Step] = []
    for part in (p.strip() for p in text.split(",")):
        if part == "p":
            steps.append(Step("probe"))
        elif part[:1] == "a":
            steps.append(Step("agents", float(part[1:] or 1.0)))
        elif part[:1] == "w" and part[1:]:
            steps.append(Step("wait", float(part[1:])))
        else:
            raise ValueError(f"unknown step {part!r}: p, a, aF or wN")
        if steps[-1].value < 0 or (steps[-1].what == "agents" and steps[-1].value == 0):
            raise ValueError(f"step {part!r}: a factor above 0, a wait of 0 s or more")
    drains = [s for s in steps if s.what != "wait"]
    if not drains or drains[0].what != "probe":
        raise ValueError("the first drain must be a probe: it sizes the agents' scenarios")
    return steps


def summary(probes: list[float]) -> dict[str, Any]:
    """Every probe's evictions/s, the first, highest over lowest, and each over the first."""
    if not probes:
        return {"probes_evictions_per_s": [], "first": None, "spread": None, "over_first": []}
    return {"probes_evictions_per_s": probes, "first": probes[0],
            "spread": round(max(probes) / min(probes), 3) if min(probes) > 0 else None,
            "over_first": [round(p / probes[0], 3) for p in probes] if probes[0] > 0 else []}


def host_spin_ms(cores: set[int], loops: int = 1_000_000) -> float:
    """The thread CPU time of a fixed loop run on ``cores`` (the server's), median of 3, in ms: the
    host's speed at that moment. A VM whose host runs slower (a busy neighbour, a lower clock)
    takes more CPU time for the same work, the server's and this loop's alike, and admits none of
    it as steal. CPU time and not wall time, so a server still busy on the core does not count.
    The calling thread's affinity is put back."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        took = []
        for _ in range(3):
            t0, acc = time.thread_time(), 0
            for i in range(loops):
                acc += i * i
            took.append(time.thread_time() - t0)
    finally:
        os.sched_setaffinity(0, before)
    return round(1000 * sorted(took)[1], 1)


def _du_mib(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                continue   # a WAL segment or a snapshot removed while we walked
    return round(total / 2**20, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_probes")
    parser.add_argument("--sequence", default=DEFAULT_SEQUENCE, help=f"steps (default {DEFAULT_SEQUENCE})")
    parser.add_argument("--probe-nodes", type=int, default=100)
    parser.add_argument("--agent-processes", type=int, default=4)
    parser.add_argument("--server-cpus", default="0")
    parser.add_argument("--other-cpus", default="1")
    args = parser.parse_args(argv)
    steps = parse_sequence(args.sequence)
    os.sched_setaffinity(0, cpu_list(args.other_cpus))
    probes: list[float] = []
    server_ms_per_pod: list[float | None] = []   # kube-apiserver + etcd CPU per pod, each probe
    steal_s: list[float | None] = []             # the hypervisor's steal on the server's core, each probe
    spin_ms: list[float] = []                    # host_spin_ms just before each probe
    failed: list[str] = []
    pool = max([args.probe_nodes] + [nodes_for(s.value, 30.0, 200.0) for s in steps if s.what == "agents"])
    with serving(pool, args.server_cpus) as (fleet, cache, plane, meter, load):
        capacity: float | None = None
        for step in steps:
            if step.what == "wait":
                time.sleep(step.value)
                print(f"idled {step.value:g} s", flush=True)
                continue
            if step.what == "probe":
                sc = probe(args.probe_nodes)
                spin_ms.append(host_spin_ms(cpu_list(args.server_cpus)))
            elif capacity is None:
                failed.append(f"agents x{step.value:g}: no capacity (the first probe failed)")
                continue
            else:
                sc = plan(capacity, [30.0], [step.value], [], max_nodes=pool)[0]   # as bench.fleet sizes it
            try:
                row = run_scenario(fleet, cache, plane, meter, load, sc, capacity, args.agent_processes, 1)
            except Exception as e:  # noqa: BLE001 -- a step that broke is reported and the exit status says it
                failed.append(f"{sc.label}: {type(e).__name__}: {e}"[:300])
                print(failed[-1], file=sys.stderr, flush=True)
                continue
            if step.what == "probe":
                if not row["completed"]:
                    failed.append(f"{sc.label}: did not drain all")
                    continue
                probes.append(row["evictions_per_s"])
                per_s = pods_per_server_cpu_s(row)
                server_ms_per_pod.append(round(1000 / per_s, 2) if per_s else None)
                steal_s.append(row["load"].get("server_core_steal_s"))
                capacity = capacity or row["evictions_per_s"]
            rss = psutil.Process(fleet.server.pids["kube-apiserver"]).memory_info().rss / 2**20
            spin = f"  host spin {spin_ms[-1]:g} ms" if step.what == "probe" else ""
            print(f"{time.strftime('%H:%M:%S')} {line(row)}  server data {_du_mib(fleet.server.base_dir):g} MiB"
                  f"  kube-apiserver RSS {rss:.0f} MiB{spin}", flush=True)
    print(json.dumps({"bench": "fleet_probes", "sequence": args.sequence, "probe_nodes": args.probe_nodes,
                      **summary(probes), "server_cpu_ms_per_pod": server_ms_per_pod, "server_core_steal_s": steal_s,
                      "host_spin_ms": spin_ms, "failed": failed}))
    return 1 if failed or not probes else 0


if __name__ == "__main__":
    sys.exit(main())
