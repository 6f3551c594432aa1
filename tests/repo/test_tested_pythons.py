"""setup.cfg's python_requires, tests/run.sh's interpreters and common/proven.py's TESTED_PYTHONS say
the same thing: exactly the CPython series the suite runs on (issue 29)."""
from __future__ import annotations

import configparser
import re
from pathlib import Path

from common.proven import TESTED_PYTHONS

REPO = Path(__file__).resolve().parents[2]


def test_python_requires_is_exactly_the_tested_series():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    first, last = TESTED_PYTHONS[0], TESTED_PYTHONS[-1]
    assert [s.strip() for s in cfg["options"]["python_requires"].split(",")] == \
        [f">={first[0]}.{first[1]}", f"<{last[0]}.{last[1] + 1}"]
    assert list(TESTED_PYTHONS) == [(3, minor) for minor in range(first[1], last[1] + 1)]   # no gap


def test_run_sh_runs_every_tested_series_after_the_first():
    run_sh = (REPO / "tests" / "run.sh").read_text()
    default = re.search(r"^OTHER_PYTHONS=\$\{SCO_TEST_PYTHONS-([0-9. ]+)\}$", run_sh, re.MULTILINE)
    assert default is not None
    assert default.group(1).split() == [f"{major}.{minor}" for major, minor in TESTED_PYTHONS[1:]]
