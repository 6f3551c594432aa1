"""bench.emit's drain: how many events a whole agent emits for one drain, by program and type.

The chaos harness (tests/chaos/kube.py) with a plan of no faults: the real supervisord, nats-server,
the metadata, API-server and Vector emulators, ``pods`` fresh pods on node-a (grace 0), the notice on
both channels. Every ``event.emitted`` line (common.runtime.SpoolLink.log_emitted: one per emit, the
verifier's included) in the programs' logs is counted, from the notice until the verdict, and then
through the withdrawal that follows (uncordon, untaint). Start-up's events are counted before the
notice and left out.
"""
from __future__ import annotations

import glob
import os
import shutil
import tempfile
import time
from collections import Counter
from typing import Any

import ujson

from tests.chaos.kube import KubeChaos
from tests.chaos.plan import DrainPlan, Timing
from tests.support.wait import wait_for

# Room for 110 pods' evictions on the emulator with nothing broken: the drain is counted, not raced.
TIMING = Timing(deadline_s=60.0, checkpoint_s=2, evict_s=40, margin_s=4)
QUIET_S = 1.5   # no new event.emitted line for this long: start-up is over


def emitted_by(log_dir: str) -> Counter[tuple[str, str]]:
    """(program, event type) -> emits, from every log file under ``log_dir`` (rotated ones too)."""
    out: Counter[tuple[str, str]] = Counter()
    for name in glob.glob(os.path.join(log_dir, "*")):
        with open(name, errors="replace") as f:
            for line in f:
                if '"event.emitted"' not in line or "{" not in line:
                    continue
                try:   # supervisord's own log puts its prefix before the plugin's JSON
                    rec = ujson.loads(line[line.index("{"):])
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("msg") == "event.emitted":
                    out[(str(rec.get("proc")), str(rec.get("type")))] += 1
    return out


class CountedDrain(KubeChaos):
    """The chaos drain, with a count taken at the verdict (before the withdrawal)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.at_verdict: Counter[tuple[str, str]] = Counter()

    def reset(self, plan: DrainPlan, notice_id: str) -> list[str]:
        assert self.stack is not None and self.stack.agent is not None
        self.at_verdict = emitted_by(self.stack.agent.log_dir)
        return super().reset(plan, notice_id)


def settled(log_dir: str) -> Counter[tuple[str, str]]:
    """The count once no program has emitted anything for QUIET_S."""
    last: list[Any] = [None, 0.0]

    def quiet() -> list[Counter[tuple[str, str]]]:
        now = emitted_by(log_dir)
        if now != last[0]:
            last[:] = [now, time.monotonic()]
            return []
        return [now] if time.monotonic() - last[1] >= QUIET_S else []   # (an empty count is a count)

    return wait_for(quiet, 60, "the agent's emits to pause", interval=0.25)[0]


def count_drain(pods: int) -> dict[str, Any]:
    base = tempfile.mkdtemp(prefix="sco-emit-")   # short: ipc:// paths must fit in a sockaddr_un
    try:
        with CountedDrain(base, 0, TIMING, say=lambda line: print(line, flush=True)) as run:
            assert run.stack is not None and run.stack.agent is not None
            log_dir = run.stack.agent.log_dir
            before = settled(log_dir)
            run.drain(DrainPlan(0, (), pods=pods, grace_s=0, channel="both", timing=TIMING))
            after = settled(log_dir)
            tally = run.tally
        drain = run.at_verdict - before
        withdrawal = after - run.at_verdict
        return {"pods": pods, "verdicts": dict(tally.verdicts), "violations": list(tally.violations),
                "drain": drain, "withdrawal": withdrawal, "startup": sum(before.values())}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def drain_cost(counted: dict[str, Any], on: dict[str, float], off: dict[str, float]) -> dict[str, Any]:
    """Print the counts and what the journal adds to them at the measured latencies; the headline part."""
    drain: Counter[tuple[str, str]] = counted["drain"]
    withdrawal: Counter[tuple[str, str]] = counted["withdrawal"]
    print()
    print(f"a {counted['pods']}-pod drain, whole agent, no fault: verdicts {counted['verdicts']},"
          f" violations {counted['violations'] or 'none'} (start-up before it: {counted['startup']} emits)")
    by_program: Counter[str] = Counter()
    for (program, kind), n in sorted(drain.items(), key=lambda kv: (-kv[1], kv[0])):
        by_program[program] += n
        print(f"  {program:>16} {kind:<28} {n:>5}")
    n_drain, n_back = sum(drain.values()), sum(withdrawal.values())
    print(f"  notice to verdict: {n_drain} emits ({dict(by_program)}); the withdrawal after it: {n_back} more")
    extra_mean = on["mean_us"] - off["mean_us"]
    extra_p99 = on["p99_us"] - off["p99_us"]
    executor = by_program.get("executor", 0)
    cost = {"pods": counted["pods"], "emits": n_drain, "emits_by_program": dict(by_program),
            "emits_withdrawal": n_back, "emits_per_pod": round(n_drain / max(1, counted["pods"]), 2),
            "journal_ms_at_mean": round(n_drain * extra_mean / 1000, 1),
            "journal_ms_at_p99": round(n_drain * extra_p99 / 1000, 1),
            "executor_journal_ms_at_mean": round(executor * extra_mean / 1000, 1),
            "verdicts": counted["verdicts"], "violations": len(counted["violations"])}
    print(f"  the journal's fsyncs for them: {cost['journal_ms_at_mean']} ms at the mean extra"
          f" ({extra_mean:.1f} us/emit), {cost['journal_ms_at_p99']} ms were every one a p99;"
          f" the executor's share (its loop, the drain's path): {cost['executor_journal_ms_at_mean']} ms")
    return cost
