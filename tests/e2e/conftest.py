"""Fixtures for end-to-end tests: the whole agent under a real supervisord."""
from __future__ import annotations

import pytest

from tests.support.stack import Stack


@pytest.fixture
def stack(tmp_path):
    with Stack(str(tmp_path)) as s:
        yield s
