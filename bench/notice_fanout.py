"""Notice fan-out latency of the agent socket: announce() in the server -> each client's read.

    python -m bench.notice_fanout

50 clients (5 processes x 10 on_notice listeners, the real stdlib client)
register with a real AgentSocketServer served by a selector loop, as the
executor would. Each round announces a new notice, stamps time.monotonic_ns()
just before announce(), and waits for all 50 acks; the clients stamp
monotonic_ns() in their callback. CLOCK_MONOTONIC is one system-wide clock on
Linux, so stamps from different processes compare directly. Ends with one JSON
line: {"fanout_p50_ms": .., "fanout_p99_ms": .., ...}. Goal: p99 <= 50 ms.
"""
from __future__ import annotations

import json
import math
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time

PROCESSES, PER_PROCESS = 5, 10
ROUNDS, WARMUP = 30, 2
ROUND_TIMEOUT_S = 10.0
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(path: str, count: int) -> None:
    """Run ``count`` listeners; on stdin EOF print {notice id: [stamps]} and exit."""
    from sco_checkpoint.client import on_notice

    stamps: dict[str, list[int]] = {}

    def heard(notice: dict) -> None:
        stamps.setdefault(notice["id"], []).append(time.monotonic_ns())

    listeners = [on_notice(heard, path=path, name=f"bench-{os.getpid()}-{i}") for i in range(count)]
    sys.stdin.read()
    for listener in listeners:
        listener.stop(timeout=1)
    print(json.dumps(stamps), flush=True)


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def serve_until(server, sel: selectors.BaseSelector, done, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if sel.select(min(left, 0.05)):
            server.process()
        server.tick()
    return True


def main() -> int:
    from common.timefmt import format_rfc3339
    from executor.agent_socket import AgentSocketServer

    tmp = tempfile.mkdtemp(prefix="sco-fanout-")
    path = os.path.join(tmp, "agent.sock")
    server = AgentSocketServer(path)
    server.listen()
    sel = selectors.DefaultSelector()
    sel.register(server.fileno(), selectors.EVENT_READ)
    env = dict(os.environ, PYTHONPATH=REPO)
    procs = [subprocess.Popen([sys.executable, "-m", "bench.notice_fanout", "--child", path, str(PER_PROCESS)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(PROCESSES)]
    clients = PROCESSES * PER_PROCESS
    sent_at: dict[str, int] = {}
    try:
        if not serve_until(server, sel, lambda: server.stats()["registered"] == clients, 60):
            print(f"only {server.stats()['registered']} of {clients} clients registered", file=sys.stderr)
            return 1
        for r in range(WARMUP + ROUNDS):
            nid = f"bench-{r}"
            now = time.time()
            notice = {"id": nid, "kind": "reclaim", "deadline": format_rfc3339(now + 120),
                      "checkpoint_by": format_rfc3339(now + 90)}
            acked = 0

            def all_acked() -> bool:
                nonlocal acked
                acked += len(server.drain_acks())
                return acked >= clients

            t0 = time.monotonic_ns()
            server.announce(notice)
            if r >= WARMUP:
                sent_at[nid] = t0
            if not serve_until(server, sel, all_acked, ROUND_TIMEOUT_S):
                print(f"round {r}: {acked}/{clients} acks before the timeout", file=sys.stderr)
                return 1
            server.withdraw(nid)
            serve_until(server, sel, lambda: False, 0.02)  # let the withdrawn lines go out
    finally:
        outputs = [p.communicate(timeout=30)[0] for p in procs]
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)

    latencies_ms = []
    for out in outputs:
        for nid, stamps in json.loads(out).items():
            if nid in sent_at:
                latencies_ms += [(s - sent_at[nid]) / 1e6 for s in stamps]
    expected = clients * ROUNDS
    p50, p99 = percentile(latencies_ms, 50), percentile(latencies_ms, 99)
    print(f"{clients} clients in {PROCESSES} processes, {ROUNDS} rounds (+{WARMUP} warm-up), "
          f"{len(latencies_ms)}/{expected} deliveries")
    print(f"announce -> client read: p50 {p50:.2f} ms  p99 {p99:.2f} ms  max {max(latencies_ms):.2f} ms")
    print(json.dumps({"fanout_p50_ms": round(p50, 3), "fanout_p99_ms": round(p99, 3),
                      "fanout_max_ms": round(max(latencies_ms), 3), "clients": clients,
                      "rounds": ROUNDS, "samples": len(latencies_ms)}))
    return 0 if len(latencies_ms) == expected else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
