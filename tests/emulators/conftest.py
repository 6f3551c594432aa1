"""Make the emulator fixtures available to the tests in this directory."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.emulators.metadata import MetadataEmulator
from tests.emulators.metadata_fixture import metadata_emu  # noqa: F401
from tests.emulators.vector_fixture import vector_emu  # noqa: F401


@pytest.fixture
def emu() -> Iterator[MetadataEmulator]:
    """An in-process metadata emulator with all four providers."""
    with MetadataEmulator() as emulator:
        yield emulator
