"""What the outbox journal's fsync costs each emit: SpoolLink.emit with the journal and without, same run.

    python -m bench.emit [--emits 3000] [--rounds 3] [--drain-pods 110] [--no-drain]

Run from the repository root. The real ``python -m spool`` runs as the peer and acknowledges every
event, as in the agent. A sender is a real ``common.runtime.SpoolLink`` emitting one event at a time,
as a process's loop does: it takes the spool's acks when the socket is readable (``on_readable``,
which lets the journal empty itself) and resends on a tick. The state dir (its journal under
``outbox/``, and the spool's own file) is in a temporary directory next to the repository, so on the
disk the repository is on, as in bench/spool.py; its filesystem is printed.

Two peers, measured in turn, ``--rounds`` times each, in alternation so both see the same machine:

- ``journal``: ``emit`` appends the event to ``state_dir/outbox/<process>.journal`` and fdatasyncs
  it before it sends (common/journal.py);
- ``no journal``: the same SpoolLink with its journal closed, so ``Journal.append`` returns at once
  and the rest of ``emit`` (Outbox, log line, zmq send) is the same.

Each ``emit`` call is timed alone (perf_counter_ns): p50, p99 and the mean, over every emit of every
round but the first ``WARMUP`` of each. emits/s is the median round's emits over its whole loop (acks and ticks
included). Then what a drain's worth of events costs: a whole agent (tests/support/stack.Stack, the
chaos harness with no fault) drains ``--drain-pods`` pods, and every ``event.emitted`` line its
programs logged is counted, by program and type; times the measured mean and p99 extra per emit,
that is the journal's cost to the drain (bench/emit_drain.py).

Prints what it measured, then one JSON line of headline figures. Nothing here is asserted.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WARMUP = 100           # emits at the start of each round left out of the latencies
TICK_S = 0.5           # as the agent's loops: resend what was not acknowledged within 2 s
PEERS = ("journal", "no_journal")


def fs_type(path: str) -> str:
    """The filesystem ``path`` is on (the longest mount point above it in /proc/self/mounts)."""
    best, kind = "", "?"
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and (real == fields[1] or real.startswith(fields[1].rstrip("/") + "/")) \
                        and len(fields[1]) >= len(best):
                    best, kind = fields[1], fields[2]
    except OSError:
        pass
    return f"{kind} on {best or '?'}"


def one_round(config: str, process: str, journal: bool, emits: int) -> dict[str, Any]:
    """``emits`` events through a fresh SpoolLink; the latency of each in ns, and the round's rate."""
    import zmq

    from common.config import load
    from common.log import Logger
    from common.runtime import SpoolLink

    ctx = zmq.Context()
    devnull = open(os.devnull, "w")   # noqa: SIM115 -- the log line is written, as to supervisord's pipe
    try:
        link = SpoolLink(ctx, load(config), process, Logger(process, stream=devnull))
        if not journal:
            link.journal.close()       # append returns at once: the rest of emit is unchanged
        poller = zmq.Poller()
        poller.register(link.sock, zmq.POLLIN)
        lat: list[int] = []
        next_tick = 0.0
        t0 = time.perf_counter()
        for i in range(emits):
            a = time.perf_counter_ns()
            link.emit("drain.evicted", notice_id="bench-notice",
                      data={"pod": f"default/trainer-{i % 110}", "uid": f"uid-{i:08d}", "grace_s": 30, "attempt": 1})
            lat.append(time.perf_counter_ns() - a)
            if poller.poll(0):
                link.on_readable()
            now = time.monotonic()
            if now >= next_tick:
                link.tick()
                next_tick = now + TICK_S
        took = time.perf_counter() - t0
        acked_by = time.monotonic() + 10
        while link.outbox.pending and time.monotonic() < acked_by:   # the spool caught up: all acked
            if poller.poll(50):
                link.on_readable()
            link.tick()
        left = len(link.outbox.pending)
        size = os.path.getsize(link.journal.path) if journal else 0
        link.close()
        return {"lat": lat[WARMUP:], "rate": emits / took, "unacked": left, "journal_bytes_after": size,
                "unjournaled": link.unjournaled}
    finally:
        ctx.destroy(linger=0)
        devnull.close()


def percentile(sorted_ns: list[int], q: float) -> float:
    """The q-quantile (nearest rank) in microseconds."""
    if not sorted_ns:
        return 0.0
    k = min(len(sorted_ns) - 1, max(0, math.ceil(q * len(sorted_ns)) - 1))
    return sorted_ns[k] / 1000


def summary(rounds: list[dict[str, Any]]) -> dict[str, float]:
    lat = sorted(x for r in rounds for x in r["lat"])
    rates = sorted(r["rate"] for r in rounds)
    return {"emits_per_s": round(rates[len(rates) // 2]), "p50_us": round(percentile(lat, 0.50), 1),
            "p99_us": round(percentile(lat, 0.99), 1), "mean_us": round(sum(lat) / len(lat) / 1000, 1),
            "max_us": round(lat[-1] / 1000, 1), "samples": len(lat)}


def measure(base: str, emits: int, rounds: int) -> dict[str, dict[str, float]]:
    from bench.spool import spool_process, write_config

    config = write_config(base)
    out: dict[str, list[dict[str, Any]]] = {p: [] for p in PEERS}
    with spool_process(config):
        wait_for_spool(config)
        for r in range(rounds):
            for peer in PEERS if r % 2 == 0 else PEERS[::-1]:   # alternate who goes first
                got = one_round(config, f"bench-{peer}-{r}", peer == "journal", emits)
                out[peer].append(got)
                print(f"round {r + 1}/{rounds} {peer:>10}: {got['rate']:>8,.0f} emits/s,"
                      f" p50 {percentile(sorted(got['lat']), 0.5):7.1f} us,"
                      f" p99 {percentile(sorted(got['lat']), 0.99):8.1f} us;"
                      f" unacked at the end {got['unacked']}, journal file after {got['journal_bytes_after']} B",
                      flush=True)
    return {peer: summary(out[peer]) for peer in PEERS}


def wait_for_spool(config: str) -> None:
    """One event acknowledged: the spool is up (its start is not measured)."""
    import zmq

    from common.config import load
    from common.log import Logger
    from common.runtime import SpoolLink

    ctx = zmq.Context()
    try:
        link = SpoolLink(ctx, load(config), "bench-warmup", Logger("bench", stream=io.StringIO()))
        link.emit("agent.started")
        until = time.monotonic() + 30
        while link.outbox.pending:
            if time.monotonic() > until:
                raise SystemExit("the spool did not acknowledge within 30 s")
            if link.sock.poll(50):
                link.on_readable()
            link.tick()
        link.close()
    finally:
        ctx.destroy(linger=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.emit", description=__doc__.splitlines()[0])
    parser.add_argument("--emits", type=int, default=3000, help="emits per round (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per peer (default 3)")
    parser.add_argument("--drain-pods", type=int, default=110, help="pods of the counted drain (default 110)")
    parser.add_argument("--no-drain", action="store_true", help="skip the drain (no whole agent started)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=REPO, prefix=".bench-emit-") as d:
        print(f"journal on {fs_type(d)}; {args.rounds} rounds of {args.emits} emits per peer, the spool acking",
              flush=True)
        peers = measure(d, args.emits, args.rounds)
    on, off = peers["journal"], peers["no_journal"]
    print()
    print(f"{'':>12} {'emits/s':>9} {'p50 us':>8} {'p99 us':>9} {'mean us':>8} {'max us':>9}")
    for name, s in (("journal", on), ("no journal", off)):
        print(f"{name:>12} {s['emits_per_s']:>9,} {s['p50_us']:>8} {s['p99_us']:>9} {s['mean_us']:>8} {s['max_us']:>9}")
    ratio = {"emits_per_s": round(off["emits_per_s"] / on["emits_per_s"], 2),
             "p50": round(on["p50_us"] / off["p50_us"], 1), "p99": round(on["p99_us"] / off["p99_us"], 1)}
    print(f"journal / no journal: p50 x{ratio['p50']}, p99 x{ratio['p99']}; emits/s no journal / journal"
          f" x{ratio['emits_per_s']}")
    headline: dict[str, Any] = {"bench": "emit", "journal": on, "no_journal": off, "ratio": ratio,
                                "extra_us_per_emit": {"p50": round(on["p50_us"] - off["p50_us"], 1),
                                                      "mean": round(on["mean_us"] - off["mean_us"], 1),
                                                      "p99": round(on["p99_us"] - off["p99_us"], 1)}}
    if not args.no_drain:
        from bench.emit_drain import count_drain, drain_cost

        counted = count_drain(args.drain_pods)
        headline["drain"] = drain_cost(counted, on, off)
    print(json.dumps(headline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
