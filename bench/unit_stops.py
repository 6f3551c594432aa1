"""Unit stops just after a spawn, on a loaded machine: how many needed the SIGKILL.

    python -m bench.unit_stops [--stops 60] [--load 9] [--max-delay 0.05]

A stop of the agent's systemd unit sends SIGTERM to every process left in it at once, and
SIGKILLs what is still there after the timeout (tests/chaos/inject.py ``systemd_stop``, as
systemd.kill(5)). Here supervisord is SIGKILLed first (a crash: systemd then stops what is
left), between 0 and ``--max-delay`` seconds after it logged the watcher's spawn -- when the
workers are being forked, the moment a stop signal could be lost in a child not yet running
(supervisord_plugins/zygote.py ``born_holding_stops``). ``--load`` busy processes keep both cores
full, so a freshly forked child waits to run, as on a node whose workload fills it.

Two arms in one run, on the same stack: ``plain_fork``, supervisord's own ``os.fork`` (the zygote's
``born_holding_stops`` replaced by a no-op through a ``sitecustomize`` on supervisord's PYTHONPATH),
then ``held``, the agent as shipped. Real supervisord, nats-server and emulators
(tests/support/stack.py). Prints one line per stop that needed the SIGKILL (with what outlived
SIGTERM: state, signal masks, threads), then one JSON line: per arm the stops, how many needed the
SIGKILL and their share. Exits non-zero only when the agent could not be run.
"""
from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import random
import sys
import tempfile
import time
from typing import Any

import ujson

from tests.chaos.inject import remove_runtime_dirs, systemd_stop
from tests.support.stack import Stack
from tests.support.wait import wait_for

SPAWNED = "spawned: 'watcher'"
# Imported by site at supervisord's start, before the zygote's factory runs: the fork is left as it is.
PLAIN_FORK = """\
import supervisord_plugins.zygote as zygote
zygote.born_holding_stops = lambda fork: fork
"""


def _busy(stop: Any) -> None:
    while not stop.is_set():
        for _ in range(100_000):
            pass


def _spawned_since(log: str, offset: int) -> bool:
    with open(log) as f:
        f.seek(offset)
        return SPAWNED in f.read()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stops", type=int, default=60, help="crash stops in each arm")
    ap.add_argument("--load", type=int, default=9, help="busy processes beside the agent")
    ap.add_argument("--max-delay", type=float, default=0.05, help="s after the watcher's spawn")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    base = tempfile.mkdtemp(prefix="bench-unit-stops-")
    plain = os.path.join(base, "plain-fork")
    os.makedirs(plain)
    with open(os.path.join(plain, "sitecustomize.py"), "w") as f:
        f.write(PLAIN_FORK)
    spawn = multiprocessing.get_context("spawn")   # not a fork of this process and its threads
    halt = spawn.Event()
    burners = [spawn.Process(target=_busy, args=(halt,), daemon=True) for _ in range(args.load)]
    arms: dict[str, dict[str, int]] = {}
    try:
        with Stack(base) as stack:
            rig = stack.agent
            log = os.path.join(rig.log_dir, "supervisord.log")
            for b in burners:
                b.start()
            for arm, pythonpath in (("plain_fork", plain), ("held", "")):
                systemd_stop(rig, crash=False)   # the last start, long settled: not counted
                remove_runtime_dirs(rig)
                rig.extra_env = {k: v for k, v in rig.extra_env.items() if k != "PYTHONPATH"}
                if pythonpath:
                    rig.extra_env["PYTHONPATH"] = pythonpath
                tally = arms[arm] = {"stops": 0, "sigkilled": 0, "spawns_not_seen": 0}
                for i in range(args.stops):
                    offset = os.path.getsize(log) if os.path.exists(log) else 0
                    rig.start(wait=False)
                    try:
                        wait_for(functools.partial(_spawned_since, log, offset), 20, "the watcher's spawn", interval=0.002,
                                 retry_on=(FileNotFoundError,))
                    except TimeoutError:
                        tally["spawns_not_seen"] += 1
                    time.sleep(rng.uniform(0.0, args.max_delay))
                    stopped = systemd_stop(rig, crash=True)
                    remove_runtime_dirs(rig)
                    tally["stops"] += 1
                    if stopped.sigkilled:
                        tally["sigkilled"] += 1
                        print(f"{arm} stop {i}: SIGKILL needed for {list(stopped.survivors)}", flush=True)
                rig.start(wait=True)   # settled again: the next arm's first stop, or the stack's exit
    except Exception as e:  # noqa: BLE001 -- could not measure: say why, exit non-zero
        print(f"bench.unit_stops: could not run the agent: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        halt.set()
        for b in burners:
            if b.pid is not None:
                b.join(5)
    for arm, tally in arms.items():
        tally["sigkilled_share"] = round(tally["sigkilled"] / tally["stops"], 4) if tally["stops"] else None  # type: ignore[assignment]
        print(f"{arm:>10}: {tally['stops']} crash stops 0-{args.max_delay * 1000:.0f} ms after the watcher's "
              f"spawn, {args.load} busy processes on {os.cpu_count()} cores: {tally['sigkilled']} needed the "
              f"SIGKILL ({tally['spawns_not_seen']} spawns not seen in time)")
    print(ujson.dumps({"bench": "unit_stops", "load": args.load, "max_delay_s": args.max_delay, **arms}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
