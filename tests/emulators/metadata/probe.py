"""Talk to the emulated services the way an agent would, for tests and rigs.

These are plain HTTP clients (``requests``), not control commands: they see
exactly what the agent would see.
"""
from __future__ import annotations

from typing import Any

import requests

TOKEN_HEADER = "X-aws-ec2-metadata-token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
META = "/latest/meta-data/"
AZURE_EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"


def imds_token(base_url: str, ttl: str = "60") -> str:
    """An IMDSv2 token (asserting the PUT succeeded)."""
    reply = requests.put(base_url + "/latest/api/token", headers={TTL_HEADER: ttl}, timeout=5)
    assert reply.status_code == 200, reply.text
    return reply.text


def imds_get(base_url: str, leaf: str, token: str | None) -> requests.Response:
    """GET ``/latest/meta-data/<leaf>`` with the token (``None``: without one)."""
    headers = {TOKEN_HEADER: token} if token is not None else {}
    return requests.get(base_url + META + leaf, headers=headers, timeout=5)


def azure_events(base_url: str) -> dict[str, Any]:
    """The Scheduled Events document (asserting a 200)."""
    reply = requests.get(base_url + AZURE_EVENTS, headers={"Metadata": "true"}, timeout=5)
    assert reply.status_code == 200, reply.text
    return reply.json()
