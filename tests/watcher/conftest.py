"""Fixtures for the watcher's tests: a real nats-server, the metadata emulator, configs."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from common.config import Config, build
from tests.emulators.metadata import MetadataEmulator
from tests.emulators.metadata_fixture import metadata_emu  # noqa: F401
from tests.support.contract_bundles import bundle_server, current, key, trusted  # noqa: F401  (re-exported fixtures)
from tests.support.nats_rig import NatsServer


@pytest.fixture
def nats(tmp_path) -> Iterator[NatsServer]:
    server = NatsServer(str(tmp_path / "nats.log")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def emu() -> Iterator[MetadataEmulator]:
    """An in-process metadata emulator with all four providers."""
    with MetadataEmulator() as emulator:
        yield emulator


def make_config(provider: str = "none", url: str = "http://127.0.0.1:9", node: str = "node-a",
                **sections: dict[str, Any]) -> Config:
    raw: dict[str, dict[str, Any]] = {"node": {"name": node, "hall": "h1"},
                                      "metadata": {"provider": provider, "url": url, "timeout_s": 1.0},
                                      "relay": {"servers": []}}
    for name, table in sections.items():
        raw.setdefault(name, {}).update(table)
    return build(raw)
