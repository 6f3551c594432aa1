"""Fixtures shared by the Kubernetes drain tests (emulator and real server alike)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.emulators.kube_fixture import kube_emulator
from tests.executor.kube.harness import Drain


@pytest.fixture
def drains() -> Iterator[list[Drain]]:
    """The drains a test starts (append each), stopped at its end whatever the outcome."""
    started: list[Drain] = []
    yield started
    for d in started:
        d.stop()


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One Kubernetes emulator per module (each test's ``kube`` fixture resets it)."""
    with kube_emulator(tmp_path_factory.mktemp("kube"), grace_cap=0.1) as kube:
        yield kube
