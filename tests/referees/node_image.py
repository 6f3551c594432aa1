"""A node image's root, built the way an image build would: a base OS, then deploy/image/install.sh.

The base OS is what the image's systemd package would have put there: the systemd unit directory
of this machine's systemd (copied, so the root has sysinit.target, multi-user.target and the
rest). Then the real install script runs with ``--root``: it builds the venv at the unit's prefix
from a freshly built wheel, compiles the .pyc, installs and enables the unit. Nothing else is
staged by hand, so `systemd-analyze verify --root` checks the ExecStart binaries the script
installed, not stand-ins.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.referees.tools import referee, run
from tests.support.agent_rig import REPO

INSTALL_SH = os.path.join(REPO, "deploy", "image", "install.sh")


def system_unit_dir() -> str:
    """The directory where this machine's systemd keeps its own units (the one with sysinit.target)."""
    res = run([referee("systemd-analyze"), "unit-paths"])
    for path in res.stdout.split():
        if os.path.exists(os.path.join(path, "sysinit.target")) and not os.path.islink(path):
            return path
    raise AssertionError(f"no unit directory with sysinit.target in: {res.stdout}")


def build(base: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """(root, the install script's result) for a node image built under ``base``."""
    root = os.path.join(base, "root")
    units = system_unit_dir()
    shutil.copytree(units, root + units, symlinks=True)
    referee("systemctl")
    res = run(["bash", INSTALL_SH, "--root", root, "--python", sys.executable], timeout=900)
    return root, res
