"""sco_checkpoint is what workloads vendor: standard library only, and client.py stands alone.

Two checks, one static and one real. The static one reads every import of the
package (ast, nothing executed), so an import hidden in a function is seen too.
The real one copies the files where no agent package and no site-packages can be
found, as a workload's image would have them, and runs them there.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "sco_checkpoint"


def imported_roots(path: Path) -> set[str]:
    """Top-level names of every absolute import in a file; relative imports as '.'."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add("." if node.level else (node.module or "").split(".")[0])
    return roots


@pytest.mark.parametrize("name", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_every_module_imports_only_the_standard_library(name: str) -> None:
    own = {"sco_checkpoint"} if name != "client.py" else set()   # client.py: one file, nothing else
    foreign = sorted(imported_roots(PACKAGE / name) - set(sys.stdlib_module_names) - {"__future__"} - own)
    assert not foreign, f"sco_checkpoint/{name} imports {foreign}"


def test_the_check_sees_a_foreign_import(tmp_path: Path) -> None:
    """The harness itself: ujson, the package importing itself from client.py, relative imports."""
    sample = tmp_path / "sample.py"
    sample.write_text("import json\nfrom ujson import dumps\nfrom . import cli\n"
                      "def f():\n    from sco_checkpoint import cli\n")
    assert imported_roots(sample) - set(sys.stdlib_module_names) == {"ujson", ".", "sco_checkpoint"}


def run_isolated(cwd: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``python -I -S``: no site-packages, no PYTHONPATH, not even the current directory on the path."""
    return subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(cwd)!r}); {code}"],
                          cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_client_py_runs_vendored_alone(tmp_path: Path) -> None:
    shutil.copy(PACKAGE / "client.py", tmp_path / "checkpoint_client.py")
    done = run_isolated(tmp_path, "import checkpoint_client as c; assert callable(c.on_notice); "
                                  "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                                  "('common', 'executor', 'zmq', 'ujson')))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_package_and_its_cli_run_vendored(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE, tmp_path / "sco_checkpoint", ignore=shutil.ignore_patterns("__pycache__"))
    done = run_isolated(tmp_path, "from sco_checkpoint import cli; sys.exit(cli.main(['--help']))")
    assert done.returncode == 0, done.stderr
    assert "sco-checkpoint" in done.stdout
    assert os.listdir(tmp_path) == ["sco_checkpoint"]
