"""Slurm drain latency on a real one-node cluster: notice -> DRAIN set, and notice -> node drained.

    python -m bench.slurm_drain [--trials 5]

The real executor (``python -m executor``, ``node.scheduler = "slurm"``) runs against
the test rig (Debian's slurmctld/slurmd/munged, proctrack/pgid), with the watcher,
spool and verifier played by tests.slurm.process.ExecutorHarness. Each trial announces
a fresh notice the way the watcher does (published at once) on a node running one job
that, on USR1, takes 1 s to checkpoint and exits. Figures are the executor's own step
times relative to the notice's ``received_at`` (the events' ``since_received_ms``):

- notice -> DRAIN set: ``drain.cordoned``, written after the DRAIN was read back;
- notice -> signalled: ``drain.signalled`` (scancel --signal=USR1 --batch);
- notice -> drained: ``drain.node_empty``, once sinfo says drained AND squeue lists no job.

Between trials the node is resumed and a new job started. Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import ujson

from tests.rigs.slurm_fixture import ensure_installed
from tests.rigs.slurm_rig import SlurmRig
from tests.slurm.harness import start_job
from tests.slurm.process import ExecutorHarness

# Checkpoints for 1 s on USR1, then exits 0.
ONE_SECOND_CHECKPOINT_JOB = """#!/bin/bash
trap 'sleep 1; echo saved > "{ckpt}"; kill $child; exit 0' USR1
echo $$ > "{started}.tmp" && mv "{started}.tmp" "{started}"
sleep 300 & child=$!
wait $child
"""

DRAIN = {"budget_s": 100, "checkpoint_s": 40, "evict_s": 50, "margin_s": 10}
SLURM = {"signal": "SIGUSR1", "signal_scope": "batch", "on_drain": "requeue"}
STEPS = (("drain_set", "drain.cordoned"), ("signalled", "drain.signalled"), ("drained", "drain.node_empty"))


def require_slurm() -> None:
    try:
        ensure_installed()
    except BaseException as e:  # noqa: BLE001 -- "cannot install" is pytest.skip (CI: pytest.fail)
        sys.exit(f"Slurm packages cannot be installed: {e}")


def trial(h: ExecutorHarness, rig: SlurmRig, work: Path) -> dict[str, int]:
    rig.reset()
    work.mkdir()
    start_job(rig, ONE_SECOND_CHECKPOINT_JOB, work)
    n = h.announce()
    h.wait_event("drain.node_empty", n["id"], timeout=60)
    assert (work / "ckpt").read_text().strip() == "saved", "the job did not checkpoint"
    return {name: h.events_of(event, n["id"])[0]["data"]["since_received_ms"] for name, event in STEPS}


def summary(values: list[int]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args(argv)
    require_slurm()
    base = Path(tempfile.mkdtemp(prefix="sco-bench-slurm-"))
    rig = SlurmRig(base / "rig").start()
    results = []
    try:
        with ExecutorHarness(rig, DRAIN, SLURM) as h:
            h.start()
            for i in range(args.trials):
                r = trial(h, rig, base / f"trial-{i}")
                results.append(r)
                print(f"trial {i + 1}: notice -> DRAIN set {r['drain_set']} ms, -> signalled {r['signalled']} ms, "
                      f"-> drained {r['drained']} ms (job checkpoints in 1 s)")
    finally:
        rig.reset()
        rig.stop()
    shutil.rmtree(base, ignore_errors=True)  # kept (rig logs) only when a trial failed
    figures = {name: summary([r[name] for r in results]) for name, _ in STEPS}
    for name, s in figures.items():
        print(f"notice -> {name}: median {s['median']} ms (min {s['min']}, max {s['max']}) over {args.trials} trials")
    print(ujson.dumps({"bench": "slurm_drain", "trials": args.trials, "job_checkpoint_s": 1,
                       "proctrack": "pgid", **{f"notice_to_{k}_ms": v for k, v in figures.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
