"""The type check: it passes, CI runs it, and the strict part covers the pure cores.

tests/run.sh (the README's test command, and all .ci/run does) runs mypy after ruff; this file
fails if that step goes missing, if mypy finds an error, or if pyproject.toml's list of strict
modules drifts from the code (a module that calls itself pure but is checked loosely, an entry
naming a module that no longer exists, a --strict flag a mypy upgrade added and the list lacks).
"""
from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
import tomllib

import pytest

from tests.unit.test_layering import REPO, product_modules, shipped_packages

MYPY = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
# The override that carries the --strict flag set: the one with warn_return_any on.
STRICT = next(o for o in MYPY["overrides"] if o.get("warn_return_any"))
# A module calls itself a pure core in the first line of its docstring.
PURE = re.compile(r"\bpure\b|sans-I/O|\bno I/O\b", re.IGNORECASE)


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)


def _is_strict(module: str) -> bool:
    return any(fnmatch.fnmatchcase(module, pattern) for pattern in STRICT["module"])


def test_every_product_package_is_type_checked():
    assert sorted(MYPY["files"]) == shipped_packages()


def test_the_product_type_checks():
    out = _mypy()
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "Success" in out.stdout
    # warn_unused_configs: an override naming no module is reported on stderr, not as an error.
    assert "unused section" not in out.stdout + out.stderr


def test_the_check_sees_a_type_error(tmp_path):
    # The harness itself: mypy with this configuration fails on a plain type error.
    bad = tmp_path / "bad.py"
    bad.write_text("def f() -> int:\n    return 'x'\n")
    out = _mypy("--config-file", str(REPO / "pyproject.toml"), str(bad))
    assert out.returncode == 1 and "[return-value]" in out.stdout


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


def _strict_flags_of_this_mypy() -> dict[str, bool]:
    """The options --strict turns on, from `mypy --help`: {"disallow_any_generics": True, ...}."""
    help_text = _mypy("--help").stdout
    paragraph = help_text.split("enables the following flags:", 1)[1].split("\n  --", 1)[0]
    # argparse wraps long flags at a hyphen: "--disallow-subclassing-\n      any".
    flags = re.findall(r"--([a-z-]+[a-z])", re.sub(r"-\n\s+", "-", paragraph))
    assert len(flags) >= 10, paragraph
    out = {}
    for flag in flags:
        name = flag.replace("-", "_")
        out[name.removeprefix("no_")] = not name.startswith("no_")
    return out


def test_the_strict_override_has_every_strict_flag():
    for option, value in _strict_flags_of_this_mypy().items():
        # warn_redundant_casts is global only in mypy; it is set for every module.
        assert STRICT.get(option, MYPY.get(option)) is value, option
    assert "strict" not in STRICT, "per-module `strict` turns strict mode on for every module"


def test_every_strict_entry_names_a_module():
    modules = product_modules()
    for pattern in STRICT["module"]:
        assert any(fnmatch.fnmatchcase(m, pattern) for m in modules), pattern


@pytest.mark.parametrize("module", sorted(product_modules()))
def test_a_module_that_calls_itself_pure_is_checked_strictly(module):
    path = product_modules()[module]
    summary = (ast.get_docstring(ast.parse(path.read_text())) or "").split("\n", 1)[0]
    if PURE.search(summary):
        assert _is_strict(module), f"{module} says it is pure; add it to the strict override"
