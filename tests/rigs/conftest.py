"""Fixtures for the rig tests: the module-scoped Slurm rig, and an admin client of a module's ``kube`` server."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.rigs.slurm_fixture import slurm_rig  # noqa: F401  (re-exported fixture)


@pytest.fixture()
def admin(kube: Any) -> Iterator[Any]:
    """An admin client of the module's real API server (its ``kube`` fixture)."""
    client = kube.client()
    yield client
    client.close()
