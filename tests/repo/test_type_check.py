"""The type check: it passes, CI runs it, and it is strict for every product module.

tests/run.sh (the README's test command, and all .ci/run does) runs mypy after ruff; this file
fails if that step goes missing, if mypy finds an error, if a product package is left out, or if
the configuration stops being strict for some module.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from tests.repo.test_layering import REPO, shipped_packages

MYPY = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
# What a per-module override may say without loosening the check.
HARMLESS_OVERRIDES = {"module", "ignore_missing_imports"}


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)


def test_every_product_package_is_type_checked():
    assert sorted(MYPY["files"]) == shipped_packages()


def test_the_product_type_checks():
    out = _mypy()
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "Success" in out.stdout
    # warn_unused_configs: an override naming no module is reported on stderr, not as an error.
    assert "unused section" not in out.stdout + out.stderr


def test_the_check_sees_a_type_error_and_a_loose_annotation(tmp_path):
    # The harness itself: mypy with this configuration fails on a plain type error, and on what
    # only strict mode refuses (a bare generic, an untyped function).
    bad = tmp_path / "bad.py"
    bad.write_text("def f() -> int:\n    return 'x'\n\n\ndef g(x: dict) -> None: ...\n\n\ndef h(x): ...\n")
    out = _mypy("--config-file", str(REPO / "pyproject.toml"), str(bad))
    assert out.returncode == 1
    for code in ("[return-value]", "[type-arg]", "[no-untyped-def]"):
        assert code in out.stdout, out.stdout


def test_run_sh_runs_mypy_after_ruff_and_before_pytest():
    run_sh = (REPO / "tests" / "run.sh").read_text().splitlines()
    assert "set -euo pipefail" in run_sh
    steps = [line.strip() for line in run_sh if line.strip() and not line.lstrip().startswith(("#", "echo"))]
    ruff = next(i for i, s in enumerate(steps) if "ruff\" check" in s)
    mypy = next(i for i, s in enumerate(steps) if "-m mypy" in s)
    pytest_ = next(i for i, s in enumerate(steps) if "-m pytest" in s)
    assert ruff < mypy < pytest_
    # Nothing that would let a failing check pass: no "|| true", no "; true", no "set +e".
    assert not re.search(r"\|\||;\s*true|set \+e", steps[mypy]), steps[mypy]
    assert not any("set +e" in s for s in steps)
    assert re.search(r"exec bash tests/run\.sh\s*$", (REPO / ".ci" / "run").read_text())


def test_every_module_is_strict():
    assert MYPY.get("strict") is True
    for override in MYPY.get("overrides", []):
        assert set(override) <= HARMLESS_OVERRIDES, f"{override['module']} loosens the check: {override}"


def test_the_two_clocks_cannot_be_mixed(tmp_path):
    """common.clock's WallTime and MonoTime are distinct to mypy: a wall-clock reading where an
    interval's monotonic one goes (and back) is a type error at the call site (issue 26, point 8)."""
    mixed = tmp_path / "mixed.py"
    mixed.write_text(
        "from common.clock import Moment, mono, wall\n"
        "from executor.drain import Drains\n"
        "from executor.kube.pod_state import Answer, PodState, transition\n\n\n"
        "def f(d: Drains) -> None:\n"
        "    transition(PodState(), Answer('blocked'), wall())\n"
        "    d.turn(mono(), wall())\n"
        "    Moment(mono(), wall())\n")
    out = _mypy("--config-file", str(REPO / "pyproject.toml"), str(mixed))
    assert out.returncode == 1
    assert out.stdout.count("[arg-type]") == 5, out.stdout
    assert 'incompatible type "WallTime"; expected "MonoTime"' in out.stdout
