"""Fixtures shared by the Kubernetes drain tests (emulator and real server alike)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.executor.kube.harness import Drain


@pytest.fixture
def drains() -> Iterator[list[Drain]]:
    """The drains a test starts (append each), stopped at its end whatever the outcome."""
    started: list[Drain] = []
    yield started
    for d in started:
        d.stop()
