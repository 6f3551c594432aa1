"""The chaos run: many drains end to end, each with faults at random moments, every invariant checked.

    python -m bench.chaos [--seed 1] [--kube-drains 100] [--slurm-drains 20]

Kubernetes: one agent under a real supervisord, a real nats-server, the metadata,
API-server and Vector emulators, the state dir on a 12 MiB tmpfs; node-a drained
again and again (fresh pods, a new notice id), node-b next to it never to be
touched. Slurm: the same agent with ``scheduler = slurm`` on the real one-node
cluster of tests/rigs/slurm_rig.py. Plans (faults, moments, durations, pods, the
notice's channel) come from ``tests/chaos/plan.py`` with the seed, so a run can
be repeated; the invariants are tests/chaos/invariants.py, and which verdict is
legitimate is documented in tests/chaos/plan.py. The Kubernetes deadline is 24 s
(cutoff 20 s), Slurm's 30 s (cutoff 26 s).

Prints one line per drain, then the table (drains run, faults injected by kind,
verdicts by kind, events counted from emission -- emitted, in Vector, set aside,
dropped, lost -- invariant violations) and one JSON line whose headline is
``emitted_lost``: events a process logged as emitted that are neither in Vector
nor accounted for by spool.poison or spool.dropped. Exits 1 if any invariant
was violated or any event lost. Needs root (the tmpfs) and the
agent's console scripts in this interpreter's bin directory (pip install '.[test]').
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from tests.chaos.kube import KubeChaos
from tests.chaos.plan import Timing, plan_run, plan_slurm_run
from tests.chaos.report import Tally, json_line, table

KUBE_TIMING = Timing()
SLURM_TIMING = Timing(deadline_s=30.0, checkpoint_s=3, evict_s=12, margin_s=4)


def say(line: str) -> None:
    print(line, flush=True)


def kube_run(base: str, seed: int, drains: int) -> Tally:
    with KubeChaos(os.path.join(base, "kube"), seed, KUBE_TIMING, say=say) as run:
        return run.run(plan_run(seed, drains, KUBE_TIMING))


def slurm_run(base: str, seed: int, drains: int) -> Tally:
    from tests.chaos.slurm import FAST_SCHEDULING, SlurmChaos
    from tests.rigs.slurm_fixture import start_rig

    try:
        rig = start_rig(os.path.join(base, "slurm-rig"), FAST_SCHEDULING)
    except BaseException as e:  # noqa: BLE001 -- "cannot install" comes as pytest.skip or, under CI, pytest.fail
        sys.exit(f"the Slurm rig cannot start: {e}")
    try:
        with SlurmChaos(os.path.join(base, "slurm"), seed, SLURM_TIMING, rig, say=say) as run:
            return run.run(plan_slurm_run(seed, drains, SLURM_TIMING))
    finally:
        rig.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kube-drains", type=int, default=100)
    parser.add_argument("--slurm-drains", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, spool copy)")
    args = parser.parse_args(argv)
    # Short: ipc:// socket paths must fit in a sockaddr_un.
    base = tempfile.mkdtemp(prefix="sco-chaos-", dir="/tmp")
    started = time.monotonic()
    tallies = []
    if args.kube_drains:
        tallies.append(kube_run(base, args.seed, args.kube_drains))
    if args.slurm_drains:
        tallies.append(slurm_run(base, args.seed, args.slurm_drains))
    print()
    print(table(tallies))
    print(f"total wall time {time.monotonic() - started:.0f} s")
    print(json_line(tallies))
    bad = any(t.violations or t.events_lost or t.emitted_lost for t in tallies)
    if bad or args.keep:
        print(f"work directory kept: {base}", file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
