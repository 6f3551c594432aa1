"""The referee tools (promtool, cloud-init, systemd-analyze): found, installed if missing, or the test stops.

tests/rigs/referees/install.sh installs them from Debian's packages (tests/run.sh calls it); a
test that needs one and finds it missing runs that script once more. Under CI (CI=true) a tool
that is still missing fails the test: CI must never pass by skipping the referee.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest

from tests.support.agent_rig import REPO

INSTALL_SH = os.path.join(REPO, "tests", "rigs", "referees", "install.sh")


def missing(why: str) -> None:
    """Fail under CI, skip elsewhere (a developer machine without root may lack the packages)."""
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"referee missing under CI: {why}")
    pytest.skip(why)


@functools.cache
def _install() -> str:
    """Run install.sh once per test session; '' on success, else why it failed."""
    try:
        res = subprocess.run(["sh", INSTALL_SH], capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if res.returncode != 0:
        return f"rc {res.returncode}: " + " / ".join((res.stderr or res.stdout).strip().splitlines()[-3:])
    return ""


def referee(tool: str) -> str:
    """The path of ``tool``, installing the referee packages first if it is not on PATH."""
    path = shutil.which(tool)
    if path is None:
        error = _install()
        path = shutil.which(tool)
        if path is None:
            missing(f"{tool} not found, and {INSTALL_SH} could not install it ({error or 'no error, still absent'})")
    assert path is not None
    return path


def cloud_init_python() -> str:
    """The interpreter cloud-init itself runs under (its script's #! line): it has cloud-init's
    modules and PyYAML, which the agent's own environment does not."""
    with open(referee("cloud-init"), encoding="utf-8") as f:
        first = f.readline()
    assert first.startswith("#!"), f"cloud-init is not a script: {first!r}"
    return first[2:].strip().split()[0]


def run(argv: list[str], stdin: str | None = None, timeout: float = 120,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
                          env=env)
