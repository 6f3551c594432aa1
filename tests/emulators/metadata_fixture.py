"""Start the metadata emulator as a subprocess for a test, and stop it by PID.

    from tests.emulators.metadata_fixture import metadata_process

    with metadata_process(tmp_path, providers=("aws",)) as emu:
        emu.aws_spot("terminate", in_s=120)
        ... point the agent at emu.url ...

or use the ``metadata_emu`` pytest fixture (all four providers). The yielded
object has ``.url`` (the service), ``.control_url``, ``.pid`` and every
``MetadataControl`` helper.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.emulators._process import EmulatorProcess
from tests.emulators.metadata.client import MetadataControl

ALL_PROVIDERS = ("aws", "gcp", "azure", "sco")


class MetadataProcess(MetadataControl):
    """A running emulator subprocess and its control helpers."""

    def __init__(self, process: EmulatorProcess) -> None:
        super().__init__(process.info["control_url"])
        self.process = process
        self.url: str = process.info["url"]
        self.pid: int = process.pid

    def stop(self) -> int | None:
        return self.process.stop()


@contextmanager
def metadata_process(workdir: Path, providers: Iterable[str] = ALL_PROVIDERS,
                     scenario: Mapping[str, Any] | None = None) -> Iterator[MetadataProcess]:
    """Run ``python -m tests.emulators.metadata`` in ``workdir`` for the ``with`` block."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    args = ["--providers", ",".join(providers)]
    if scenario is not None:
        path = workdir / "scenario.json"
        path.write_text(json.dumps(scenario))
        args += ["--scenario", str(path)]
    process = EmulatorProcess("tests.emulators.metadata", args, workdir)
    process.start()
    try:
        yield MetadataProcess(process)
    finally:
        process.stop()


@pytest.fixture
def metadata_emu(tmp_path: Path) -> Iterator[MetadataProcess]:
    """All four providers, default identities, in a subprocess."""
    with metadata_process(tmp_path / "metadata-emu") as emu:
        yield emu
