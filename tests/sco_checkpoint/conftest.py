"""Fixtures for the agent socket tests: a short socket path and a served server."""
from __future__ import annotations

import shutil
import tempfile

import pytest

from tests.agent_socket.harness import ServerThread


@pytest.fixture
def sock_dir():
    # Not tmp_path: a Unix socket path must fit in 108 bytes and pytest's paths grow with test names.
    path = tempfile.mkdtemp(prefix="sco-as-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sock_path(sock_dir):
    return f"{sock_dir}/agent.sock"


@pytest.fixture
def serve(sock_path):
    """serve(**server_kwargs) -> a running ServerThread, stopped after the test."""
    started: list[ServerThread] = []

    def start(**kwargs) -> ServerThread:
        st = ServerThread(kwargs.pop("path", sock_path), **kwargs)
        started.append(st)
        return st

    yield start
    for st in started:
        st.stop()
