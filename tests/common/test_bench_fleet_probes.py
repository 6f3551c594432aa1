"""bench.fleet_probes: the step sequence it runs, the summary of its probes, and the host spin that leaves the
calling thread's affinity as it found it."""
from __future__ import annotations

import os

import pytest

from bench.fleet_probes import DEFAULT_SEQUENCE, Step, host_spin_ms, parse_sequence, summary


def test_the_sequence_names_probes_agents_at_a_factor_and_idle_waits():
    assert parse_sequence("p,a,a2,w120,p") == [Step("probe"), Step("agents", 1.0), Step("agents", 2.0),
                                                Step("wait", 120.0), Step("probe")]
    assert parse_sequence("w5, p") == [Step("wait", 5.0), Step("probe")]    # an idle start is no drain
    steps = parse_sequence(DEFAULT_SEQUENCE)
    assert [s.what for s in steps].count("probe") == 8 and steps[0] == Step("probe")


@pytest.mark.parametrize("text", ["a,p", "w5,a", "", "p,x", "p,w", "p,a0", "p,w-1", "w10"])
def test_a_sequence_that_cannot_run_is_refused_before_the_server_starts(text: str):
    with pytest.raises(ValueError):
        parse_sequence(text)


def test_the_summary_gives_every_probe_the_spread_and_each_over_the_first():
    s = summary([160.0, 144.0, 120.0])
    assert s["probes_evictions_per_s"] == [160.0, 144.0, 120.0] and s["first"] == 160.0
    assert s["spread"] == round(160 / 120, 3)
    assert s["over_first"] == [1.0, 0.9, 0.75]
    assert summary([])["spread"] is None


def test_the_host_spin_runs_on_the_server_cores_and_gives_the_thread_its_affinity_back():
    mine = os.sched_getaffinity(0)
    core = min(mine)
    assert host_spin_ms({core}, loops=20_000) > 0
    assert os.sched_getaffinity(0) == mine
