"""bench.footprint's verdict lines: issue 20's limits and the seed's 40 MiB, which stays the goal."""
from __future__ import annotations

import sys

from bench.footprint import BUDGET_MIB, headline, python_name


def test_the_idle_verdict_compares_with_the_limits_and_the_seed_budget():
    line = headline("idle", {"distinct": 59.1, "pss": 51.0, "millicores": 3.0})
    assert "limits 60 / 52 MiB: within" in line
    assert f"seed budget {BUDGET_MIB:.0f} MiB: distinct 19.1 MiB over, PSS +11.0 MiB" in line
    assert "OVER" in headline("idle", {"distinct": 61.0, "pss": 51.0, "millicores": 3.0})


def test_the_after_drain_line_compares_with_the_seed_budget_and_names_the_interpreter():
    line = headline("after the drain", {"distinct": 38.0, "pss": 30.0, "millicores": 9.0}, limits=False)
    assert "limits" not in line
    assert "seed budget 40 MiB: distinct 2.0 MiB under, PSS -10.0 MiB" in line
    assert f"({python_name()})" in line and python_name().endswith(".".join(map(str, sys.version_info[:3])))
