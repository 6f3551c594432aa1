"""Fixtures for the rig tests: the module-scoped Slurm rig."""
from __future__ import annotations

from tests.rigs.slurm_fixture import slurm_rig  # noqa: F401  (re-exported fixture)
