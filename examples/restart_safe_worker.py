"""A restart-safe worker: checkpoint on the reclaim notice, resume from the checkpoint on start.

    python examples/restart_safe_worker.py --state /scratch/job42/progress.json --units 100000

It counts work units. When the node agent announces a reclaim, the callback
saves the count; if the instance is then taken away, the next start (on
another node, same state path) resumes from the saved count. Units done
after the checkpoint are redone, so a unit must be safe to repeat.

A checkpoint that takes longer than the notice allows (``--save-seconds``, standing in
for copying state to shared storage) first asks the agent for that much more time with
``extend``: the agent grants what its drain budget allows (maybe less), and holds this
worker's pod, and only that one, until the granted time.

The whole integration is the ``on_notice(checkpoint)`` line (and ``extend`` if the save is slow). sco_checkpoint/client.py
is standard-library only: vendor that one file next to this script as checkpoint_client.py,
or install sco-agent.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

try:
    from sco_checkpoint.client import ExtendRefused, extend, on_notice
except ImportError:  # vendored next to this script
    from checkpoint_client import ExtendRefused, extend, on_notice


def load(path: str) -> int:
    try:
        with open(path) as f:
            return int(json.load(f)["done"])
    except FileNotFoundError:
        return 0


def save(path: str, done: int) -> None:
    """Write the checkpoint atomically: a crash mid-write leaves the previous one intact."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"done": done}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", required=True, help="checkpoint file (shared storage in real life)")
    parser.add_argument("--units", type=int, default=1_000_000, help="total units of work")
    parser.add_argument("--unit-seconds", type=float, default=0.01, help="time one unit takes")
    parser.add_argument("--log-every", type=int, default=1000, help="print progress every N units")
    parser.add_argument("--save-seconds", type=float, default=0.0,
                        help="how long saving the checkpoint takes; over 0, ask the agent for that much more time")
    args = parser.parse_args(argv)

    done = load(args.state)
    lock = threading.Lock()  # the callback runs in the listener thread
    print(f"resuming at unit {done}", flush=True)

    def checkpoint(notice: dict) -> None:
        if args.save_seconds > 0:
            try:
                by = extend(int(args.save_seconds + 0.999))   # the agent's answer counts: maybe less
                print(f"extended: checkpoint by {by}", flush=True)
            except ExtendRefused as e:
                print(f"no extension ({e}); saving within {notice['checkpoint_by']}", flush=True)
        with lock:
            time.sleep(args.save_seconds)  # the slow part of a real save (copying state away)
            save(args.state, done)
            print(f"checkpointed at unit {done} for notice {notice['id']}", flush=True)
        # Returning normally acks "checkpointed"; an exception would ack "failed".

    on_notice(checkpoint, name="restart-safe-worker")

    while done < args.units:
        time.sleep(args.unit_seconds)  # one unit of real work
        with lock:
            done += 1
        if done % args.log_every == 0:
            print(f"unit {done} done", flush=True)
    with lock:
        save(args.state, done)
    print(f"finished at unit {done}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
