"""Instance-metadata emulator: AWS IMDSv2, GCP, Azure Scheduled Events and the SCO hall.

One process serves one scenario (which providers, whose identity); the
``/_emu/`` control API changes it while it runs (notices, events, clock,
faults). Run it with ``python -m tests.emulators.metadata --port 0 --ready-file
PATH`` or in-process with ``MetadataEmulator``; ``tests.emulators.metadata_fixture``
starts it as a subprocess for tests.
"""
from __future__ import annotations

from tests.emulators.metadata.app import PROVIDERS, MetadataApp, MetadataEmulator
from tests.emulators.metadata.client import MetadataControl

__all__ = ["PROVIDERS", "MetadataApp", "MetadataControl", "MetadataEmulator"]
