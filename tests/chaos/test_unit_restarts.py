"""A relay-only notice survives 20 unit restarts at random moments of its drain.

NATS core sends a notice once: after a restart only what the agent wrote down can carry its drain
on. Each restart is the harness's systemd (tests/chaos/inject.py): the unit stopped -- SIGTERM to
its whole process tree, SIGKILL after the timeout, supervisord SIGKILLed first for half of them
(a crash) -- the runtime directory removed with every socket and fallback copy in it, supervisord
started again after a RestartSec. Real supervisord, real nats-server, the API-server, metadata and
Vector emulators; the chaos run's invariants (tests/chaos/invariants.py) all hold: one verdict,
done, cordoned, no pod left, none evicted twice, no step announced twice, nothing lost on the way
to Vector.

The drain is made long on purpose: the emulator's kubelet removes the pods 6 to 46 s after their
eviction, so every restart lands while the drain runs (checked: each one before ``drain.done``).
The moments and kinds come from a seeded RNG; the seed is printed, and SCO_CHAOS_SEED repeats a run.
"""
from __future__ import annotations

import itertools
import os
import random
from collections import Counter
from typing import Any

from common.timefmt import parse_rfc3339
from tests.chaos import invariants
from tests.chaos.kube import KubeChaos
from tests.chaos.plan import RESTARTS, DrainPlan, Fault, Timing, spread

SEED = int(os.environ.get("SCO_CHAOS_SEED", "17"))
COUNT = 20
TERMINATE_AFTER_S = (6, 16, 26, 36, 46)   # each pod is removed this long after its eviction
FIRST_S, LAST_S = 2.0, 42.0               # restarts between: the relay notice is on disk by the first
RESTART_SEC = (0.1, 0.6)                  # how long the unit stays down (systemd's RestartSec=)
TIMING = Timing(deadline_s=90.0, checkpoint_s=2, evict_s=70, margin_s=8)


def restart_plan(seed: int) -> DrainPlan:
    rng = random.Random(seed)
    moments = sorted(round(rng.uniform(FIRST_S, LAST_S), 2) for _ in range(COUNT))
    faults = spread([Fault(rng.choice(RESTARTS), at, round(rng.uniform(*RESTART_SEC), 2)) for at in moments],
                    end_s=LAST_S + COUNT)
    return DrainPlan(0, faults, pods=len(TERMINATE_AFTER_S), grace_s=1, channel="relay", timing=TIMING)


class SlowPods(KubeChaos):
    def pod_options(self, plan: DrainPlan, j: int) -> dict[str, Any]:
        return {"grace": plan.grace_s, "terminate_after": TERMINATE_AFTER_S[j]}


def test_the_plan_is_twenty_restarts_of_both_kinds_on_the_relay_alone():
    plan = restart_plan(SEED)
    assert len(plan.faults) == COUNT and {f.kind for f in plan.faults} == set(RESTARTS)
    assert plan.channel == "relay" and not plan.overrun_allowed()
    assert all(b.at >= a.end for a, b in itertools.pairwise(plan.faults))   # one restart at a time


def test_a_relay_only_notice_survives_20_unit_restarts_mid_drain(tmp_path):
    print(f"unit restarts: seed {SEED} (SCO_CHAOS_SEED={SEED} repeats this run)")
    plan = restart_plan(SEED)
    with SlowPods(str(tmp_path), SEED, TIMING, say=lambda line: print(line, flush=True)) as run:
        tally = run.run([plan])
        restarts = list(run.injector.restarts)
        events = run.events()
    assert tally.violations == [], f"seed {SEED}"
    assert dict(tally.verdicts) == {"done": 1}, f"seed {SEED}"
    assert dict(tally.faults) == dict(Counter(f.kind for f in plan.faults))
    assert not tally.skipped and tally.events_lost == 0
    nid = run.notices[0]
    (done,) = [e for e in invariants.verdicts_of(events, nid) if e["type"] == "drain.done"]
    received = [e for e in events if e["type"] == "notice.received" and e["notice_id"] == nid]
    assert [e["data"]["channel"] for e in received] == ["relay"]   # heard once, on the relay only
    started = parse_rfc3339(received[0]["ts"])
    # Every restart landed between the notice's arrival and the end of its drain ...
    assert len(restarts) == COUNT and all(started < r.at < parse_rfc3339(done["ts"]) for r in restarts), (
        f"seed {SEED}: restarts at {[round(r.at - started, 1) for r in restarts]} s, "
        f"done at {parse_rfc3339(done['ts']) - started:.1f} s")
    # ... and every process of the agent stopped on SIGTERM, none had to be SIGKILLed by the timeout.
    assert not [r for r in restarts if r.sigkilled], f"seed {SEED}"
