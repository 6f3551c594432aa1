"""Fixtures shared by the Kubernetes drain tests (emulator and real server alike)."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.emulators.kube_fixture import kube_emulator
from tests.executor.kube.harness import NODE, OTHER, Drain
from tests.rigs.kube_real_objects import KubeClient, ensure_namespace


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


@pytest.fixture
def kube(emulator: Any) -> Any:
    """The module's emulator, reset, with this node and another (a module that needs other
    nodes or pods defines its own ``kube``)."""
    emulator.reset()
    emulator.add_node(NODE)
    emulator.add_node(OTHER)
    return emulator


@pytest.fixture
def admin(kube: Any) -> Iterator[KubeClient]:
    """The cluster admin's client of a module on the real server (its ``kube``: a RealApiServer)."""
    client = kube.client()
    yield client
    client.close()


@pytest.fixture
def ns(admin: KubeClient) -> str:
    """A namespace of the test's own on the real server."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    ensure_namespace(admin, name)
    return name
