"""bench/worker_life.py: a bench's worker does not outlive a bench that was killed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]

# A bench in small: it starts a worker that would run for a minute, says its pid, and waits.
BENCH = """
import multiprocessing, sys, time
from bench.worker_life import exit_with_parent

def work(watch):
    if watch:
        exit_with_parent(poll_s=0.1)
    time.sleep(60)

if __name__ == "__main__":
    p = multiprocessing.get_context(sys.argv[2]).Process(target=work, args=(sys.argv[1] == "watch",), daemon=True)
    p.start()
    print(p.pid, flush=True)
    time.sleep(60)
"""


def _killed_bench_leaves(watch: bool, context: str) -> bool:
    """Start the small bench, SIGKILL it, and say whether its worker is still running 5 s later."""
    bench = subprocess.Popen([sys.executable, "-c", BENCH, "watch" if watch else "none", context],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert bench.stdout is not None
    worker = psutil.Process(int(bench.stdout.readline()))
    try:
        os.kill(bench.pid, signal.SIGKILL)
        bench.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE:
                return False
            time.sleep(0.05)
        return True
    finally:
        if worker.is_running():
            worker.kill()


def test_a_worker_that_watches_its_parent_exits_when_the_bench_is_killed() -> None:
    assert not _killed_bench_leaves(watch=True, context="spawn")
    assert not _killed_bench_leaves(watch=True, context="fork")


def test_without_the_watch_the_worker_would_live_on() -> None:
    # Why the watch is needed: multiprocessing's own clean-up of daemon workers runs only at a
    # normal exit of the parent.
    assert _killed_bench_leaves(watch=False, context="fork")
