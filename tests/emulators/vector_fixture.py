"""Start the Vector emulator as a subprocess for a test, and stop it by PID.

    from tests.emulators.vector_fixture import vector_process

    with vector_process(tmp_path, path="/events") as vec:
        ... ship to vec.url ...
        vec.wait_for_records(10)

or use the ``vector_emu`` pytest fixture (path ``/``). The yielded object has
``.url`` (the full URL to POST batches to), ``.base_url``, ``.control_url``,
``.pid`` and every ``VectorControl`` helper.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.emulators._process import EmulatorProcess
from tests.emulators.vector import VectorControl


class VectorProcess(VectorControl):
    """A running Vector emulator subprocess and its control helpers."""

    def __init__(self, process: EmulatorProcess, path: str) -> None:
        super().__init__(process.info["control_url"])
        self.process = process
        self.base_url: str = process.info["url"]
        self.url = self.base_url + path
        self.pid: int = process.pid

    def stop(self) -> int | None:
        return self.process.stop()


@contextmanager
def vector_process(workdir: Path, path: str = "/", framing: str = "newline_delimited",
                   poison_field: str | None = None,
                   poison_values: tuple[Any, ...] = ()) -> Iterator[VectorProcess]:
    """Run ``python -m tests.emulators.vector`` in ``workdir`` for the ``with`` block."""
    args = ["--path", path, "--framing", framing]
    if poison_field is not None:
        args += ["--poison-field", poison_field]
        for value in poison_values:
            args += ["--poison-value", json.dumps(value)]
    process = EmulatorProcess("tests.emulators.vector", args, Path(workdir))
    process.start()
    try:
        yield VectorProcess(process, path)
    finally:
        process.stop()


@pytest.fixture
def vector_emu(tmp_path: Path) -> Iterator[VectorProcess]:
    """A Vector emulator on path ``/`` in a subprocess."""
    with vector_process(tmp_path / "vector-emu") as vec:
        yield vec
