"""Fixtures of the referee tests: one textfile from the real verifier, shared by the module."""
from __future__ import annotations

import pytest

from tests.referees import textfile


@pytest.fixture(scope="session")
def verifier_textfile(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The exposition text the real verifier wrote after a done, an overrun and rejections."""
    return textfile.produce(str(tmp_path_factory.mktemp("verifier-textfile")))
