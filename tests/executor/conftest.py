"""Fixtures for the agent socket tests: a short socket path and a served server (tests/support/agent_socket.py)."""
from tests.support.agent_socket import serve, sock_dir, sock_path  # noqa: F401  (re-exported fixtures)
