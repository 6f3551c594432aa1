"""pytest glue for the Slurm rig: install the packages, start one rig, stop it afterwards.

The only reason to skip is that Debian's Slurm packages cannot be installed (not root, no
apt, no registry), and only on a developer's machine: under CI that is a failure too
(tests/ci.py). Once installed, a rig that fails to start is a test failure, never a skip.

Use the ready fixture from any conftest.py (one rig per test module):

    from tests.rigs.slurm_fixture import slurm_rig  # noqa: F401  (re-exported fixture)
"""
from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping

import pytest

from tests.ci import cannot_run, require
from tests.rigs.slurm_rig import SlurmRig

INSTALL_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slurm", "install.sh")


def ensure_installed(timeout: float = 600.0) -> None:
    """Run install.sh (a no-op when installed); skip (CI: fail) the calling test if it cannot install."""
    try:
        res = subprocess.run([INSTALL_SH], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        cannot_run(f"Slurm packages cannot be installed: {e}")
    tail = " / ".join((res.stderr or res.stdout).strip().splitlines()[-3:])
    require(res.returncode == 0, f"Slurm packages cannot be installed ({INSTALL_SH} rc {res.returncode}): {tail}")


def start_rig(base_dir: str | os.PathLike[str], conf_overrides: Mapping[str, str] | None = None) -> SlurmRig:
    """A started rig in ``base_dir`` (node idle); the caller must ``stop()`` it."""
    ensure_installed()
    return SlurmRig(base_dir, conf_overrides=conf_overrides).start()


@pytest.fixture(scope="module")
def slurm_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmRig]:
    """One running rig shared by the tests of a module; stopped (every PID checked) at the end."""
    rig = start_rig(tmp_path_factory.mktemp("slurm-rig"))
    try:
        yield rig
    finally:
        rig.stop()
