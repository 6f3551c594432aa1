"""A tier that cannot run: skipped on a developer's machine, a failure under CI.

CI (``CI=true``, as every CI service sets it and .ci/run does) must run every tier: a green run
that skipped the Slurm rig or the real kube-apiserver proved nothing about them. On a
developer's machine without root or apt the same test skips, with the same reason.

    require(os.geteuid() == 0, "the Slurm rig needs root to start slurmctld")

tests/conftest.py turns any other skip into a failure under CI too, so none slips in unnoticed.
"""
from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def cannot_run(reason: str) -> NoReturn:
    """Skip (developer) or fail (CI) the calling test, naming ``reason``."""
    if in_ci():
        pytest.fail(f"cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def require(condition: object, reason: str) -> None:
    """Go on if ``condition`` holds; else ``cannot_run(reason)``."""
    if not condition:
        cannot_run(reason)
