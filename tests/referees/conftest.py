"""Fixtures of the referee tests: one textfile from the real verifier, shared by the module."""
from __future__ import annotations

import pytest

from tests.referees import textfile


@pytest.fixture(scope="session")
def verifier_textfile(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The exposition text the real verifier wrote after a done, an overrun and rejections."""
    return textfile.produce(str(tmp_path_factory.mktemp("verifier-textfile")))


@pytest.fixture(scope="session")
def node_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The root of a node image that deploy/image/install.sh installed into (built once)."""
    from tests.referees import node_image as image

    root, res = image.build(str(tmp_path_factory.mktemp("node-image")))
    assert res.returncode == 0, f"install.sh failed (rc {res.returncode}):\n{res.stderr[-3000:]}"
    return root
