"""The chaos run, a small fixed subset: 6 Kubernetes drains and 2 Slurm drains under faults.

The plans are written out rather than drawn, so every fault kind lands at a
moment where the invariants must hold, and the run is the same every time
(``bench/chaos.py`` draws many more from a seeded RNG). Every drain but the last
Kubernetes one must end ``done``: its faults are over well before the cutoff. The
last one has the API server down from before the notice until past the cutoff,
which is what makes an ``overrun`` legitimate -- and there it must be one.
"""
from __future__ import annotations

import pytest

from tests.chaos.kube import KubeChaos
from tests.chaos.plan import KUBE_KINDS, LONG_OUTAGE, SLURM_KINDS, DrainPlan, Fault, Timing, long_outage
from tests.chaos.slurm import FAST_SCHEDULING, SlurmChaos
from tests.rigs.slurm_fixture import start_rig

T = Timing()                                   # deadline 24 s, cutoff 20 s
SHORT = Timing(deadline_s=14.0)                # the overrun drain: cutoff 10 s
SLURM_T = Timing(deadline_s=30.0, checkpoint_s=3, evict_s=12, margin_s=4)

KUBE_PLANS = [
    # Relay only: NATS core does not send it again, so it survives the unit restart only on disk.
    DrainPlan(0, (Fault("kill_executor", 0.3, 0), Fault("api_500", 0.8, 3.0), Fault("unit_restart", 2.5, 0.5)),
              pods=4, grace_s=2, channel="relay"),
    DrainPlan(1, (Fault("vector_down", 0.0, 7.0), Fault("kill_supervisord", 0.6, 1.0), Fault("api_down", 1.0, 2.5)),
              pods=3, grace_s=2, channel="both"),
    DrainPlan(2, (Fault("metadata_hang", 0.0, 2.5), Fault("nats_restart", 0.2, 2.0), Fault("kill_spool", 1.0, 0),
                  Fault("api_slow", 0.3, 3.0), Fault("kafka_500", 0.5, 3.0)), pods=3, grace_s=1, channel="both"),
    DrainPlan(3, (Fault("disk_full", 0.0, 5.0), Fault("metadata_error", 0.5, 2.0), Fault("kill_verifier", 2.5, 0),
                  Fault("kafka_400", 0.8, 4.0)), pods=3, grace_s=1, channel="metadata"),
    DrainPlan(4, (Fault("vector_slow", 0.0, 4.0), Fault("api_timeout", 0.3, 3.0), Fault("kill_watcher", 0.8, 0),
                  Fault("api_429", 4.0, 2.0)), pods=5, grace_s=0, channel="both"),
    DrainPlan(5, (long_outage(-0.5, SHORT),), pods=3, grace_s=3, channel="both", timing=SHORT),
]
SLURM_PLANS = [
    # Killed after the checkpoint signal: the restarted executor requeues at the cutoff, signals nothing again.
    DrainPlan(0, (Fault("kill_executor", 0.8, 0),), channel="relay", job="keep_running", timing=SLURM_T),
    # The controller away from just after the notice: the drain goes around it, then reconciles.
    DrainPlan(1, (Fault("slurmctld_restart", 0.3, 3.0), Fault("kill_verifier", 4.0, 0)), channel="both",
              job="keep_running", timing=SLURM_T),
]


def test_the_fixed_plans_cover_every_fault_kind():
    assert {f.kind for p in KUBE_PLANS for f in p.faults} == {*KUBE_KINDS, LONG_OUTAGE}
    assert {"kill_executor", "slurmctld_restart"} <= {f.kind for p in SLURM_PLANS for f in p.faults} <= set(SLURM_KINDS)
    assert [p.overrun_allowed() for p in KUBE_PLANS] == [False] * 5 + [True]


def test_kubernetes_drains_keep_every_invariant_under_faults(tmp_path):
    with KubeChaos(str(tmp_path), 0, T, say=lambda line: print(line, flush=True)) as run:
        tally = run.run(KUBE_PLANS)
    assert tally.violations == []
    assert tally.drains == 6 and dict(tally.verdicts) == {"done": 5, "overrun": 1}
    # Only the disk fault needs root (the tmpfs); without it that one fault is skipped, nothing else.
    skipped = {} if run.disk else {"disk_full": 1}
    assert dict(tally.skipped) == skipped
    assert sum(tally.faults.values()) + sum(skipped.values()) == sum(len(p.faults) for p in KUBE_PLANS)
    assert tally.events_lost == 0 and tally.events_spooled > 0
    assert tally.emitted_lost == 0 and tally.events_emitted > 0 and tally.emitted_delivered > 0


@pytest.fixture(scope="module")
def slurm_rig(tmp_path_factory):
    rig = start_rig(tmp_path_factory.mktemp("chaos-slurm-rig"), FAST_SCHEDULING)
    try:
        yield rig
    finally:
        rig.stop()


def test_slurm_drains_keep_every_invariant_under_faults(tmp_path, slurm_rig):
    with SlurmChaos(str(tmp_path), 0, SLURM_T, slurm_rig, say=lambda line: print(line, flush=True)) as run:
        tally = run.run(SLURM_PLANS)
    assert tally.violations == []
    assert tally.drains == 2 and dict(tally.verdicts) == {"done": 2}
    assert sum(tally.faults.values()) == 3 and not tally.skipped
    assert tally.events_lost == 0
    assert tally.emitted_lost == 0 and tally.events_emitted > 0
