"""Under CI (CI=true) a tier that cannot run fails; on a developer's machine it skips.

Runs a small test file through a real pytest with this suite's conftest, both ways.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = '''
import pytest
from tests.ci import require

def test_require_met():
    require(True, "never shown")

def test_require_unmet():
    require(False, "the rig needs root")

@pytest.fixture
def rig():
    require(False, "fixture cannot start the rig")

def test_fixture_unmet(rig):
    pass

def test_plain_skip():
    pytest.skip("a plain skip")

@pytest.mark.skipif(True, reason="a skipif mark")
def test_marked():
    pass
'''


def run_probe(tmp_path: Path, ci: str | None) -> tuple[dict[str, int], str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    summary = out.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary)}
    return counts, out.stdout


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_on_a_developer_machine_an_unmet_tier_skips(tmp_path: Path, ci: str | None) -> None:
    counts, out = run_probe(tmp_path, ci)
    assert counts == {"passed": 1, "skipped": 4}, out


@pytest.mark.parametrize("ci", ["true", "1", "TRUE"])
def test_under_ci_every_skip_is_a_failure_with_its_reason(tmp_path: Path, ci: str) -> None:
    counts, out = run_probe(tmp_path, ci)
    # A test body's skip counts as failed; one in a fixture or a mark as an error (setup).
    assert counts == {"passed": 1, "failed": 2, "errors": 2}, out
    assert "cannot run under CI: the rig needs root" in out
    assert "cannot run under CI: fixture cannot start the rig" in out
    assert "skipped under CI, where every tier must run: Skipped: a plain skip" in out
    assert "skipped under CI, where every tier must run: Skipped: a skipif mark" in out
