"""Benchmark: what an idle drain costs its agent -- a drain whose every pod waits on a PDB with no room.

Run from the repository root with ``python -m bench.idle_cost`` (no argument needed).

``--drains`` drains run at once in this process, each the agent's own ``DrainRunner`` for its own
node of 30 pods under one PDB at ``maxUnavailable: 0`` (nothing may go), against the Kubernetes
API-server emulator in a process of its own. Past their start (lists, watches, the first
refusal) the drains only wait: this process's CPU over ``--seconds`` is their idle cost. It is
measured for each replan interval of ``--idle-turns`` (``executor.kube.runner.IDLE_TURN_S``, the
drain's replan when nothing wakes it; the product's is the first), so the figures say what the
interval costs. The last line is one JSON object with the headline figures.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.drain_cost import agent_api, cpu_s, spec_for
from executor.kube import runner

SETTLE_S = 8.0   # the start: lists, watches, each drain's first refusal


def idle_round(kube: Any, tag: str, drains: int, seconds: float, idle_turn_s: float) -> dict[str, Any]:
    from tests.emulators.kube import objects

    runner.IDLE_TURN_S = idle_turn_s
    nodes = [f"idle-{tag}-{d}" for d in range(drains)]
    for d, node in enumerate(nodes):
        ns = f"{tag}-{d}"
        kube.seed(objects.node(node), objects.namespace(ns),
                  objects.pdb("web", {"app": "web"}, namespace=ns, max_unavailable="0"),
                  *[objects.pod(f"p-{i:02d}", node, namespace=ns, labels={"app": "web"}) for i in range(30)])
    requests: list[tuple[str, str, int]] = []
    runners = [runner.DrainRunner(spec_for(n), agent_api(kube, n, requests), lambda r: None).start() for n in nodes]
    try:
        time.sleep(SETTLE_S)
        cpu0, sent0, t0 = cpu_s(), len(requests), time.monotonic()
        time.sleep(seconds)
        cpu1, sent1, wall = cpu_s(), len(requests), time.monotonic() - t0
    finally:
        for r in runners:
            r.stop()
        for r in runners:
            r.join(10)
    return {"idle_turn_s": idle_turn_s, "drains": drains, "seconds": round(wall, 1),
            "cpu_ms_per_drain_second": round((cpu1 - cpu0) / drains / wall * 1000, 3),
            "requests_per_drain_second": round((sent1 - sent0) / drains / wall, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_cost")
    parser.add_argument("--drains", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--idle-turns", default=f"{runner.IDLE_TURN_S:g},5",
                        help="replan intervals to measure, seconds (the product's first)")
    args = parser.parse_args(argv)
    from tests.emulators.kube_fixture import kube_emulator

    rows = []
    with tempfile.TemporaryDirectory() as d, kube_emulator(Path(d)) as kube:
        for k, idle in enumerate(float(x) for x in args.idle_turns.split(",")):
            row = idle_round(kube, f"r{k}", args.drains, args.seconds, idle)
            rows.append(row)
            print(f"replan every {idle:g} s: {row['drains']} idle drains, {row['cpu_ms_per_drain_second']} ms of CPU "
                  f"per drain-second, {row['requests_per_drain_second']} requests per drain-second", flush=True)
    product = rows[0]
    print(json.dumps({"bench": "idle_cost", "rows": rows,
                      "cpu_ms_per_drain_second": product["cpu_ms_per_drain_second"],
                      "cores_for_1000_idle_drains": round(product["cpu_ms_per_drain_second"] * 1000 / 1000, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
