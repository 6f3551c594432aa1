"""bench.fleet_agents' per-kind count of the drains' requests (what a row's requests per pod are made of)."""
from __future__ import annotations

import pytest

from bench.fleet_agents import request_kind


@pytest.mark.parametrize(("method", "path", "status", "kind"), [
    ("POST", "/api/v1/namespaces/a/pods/p/eviction", 201, "eviction"),
    ("POST", "/api/v1/namespaces/a/pods/p/eviction", 429, "eviction -> 429"),
    ("GET", "/apis/policy/v1/namespaces/a/poddisruptionbudgets?limit=100", 200, "pdbs.list"),
    ("GET", "/apis/policy/v1/namespaces/a/poddisruptionbudgets?watch=1&resourceVersion=5", 200, "pdbs.watch"),
    ("GET", "/apis/policy/v1/namespaces/a/poddisruptionbudgets/app-0", 200, "pdbs.get"),
    ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn&resourceVersion=0", 200, "pods.list.cache"),
    ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn&resourceVersion=9&resourceVersionMatch=NotOlderThan", 504,
     "pods.list.not_older_than -> 504"),
    ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn&watch=1", 200, "pods.watch"),
    ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn", 200, "pods.list.consistent"),
    ("PATCH", "/api/v1/nodes/n/status", 200, "node.patch.status"),
    ("GET", "/api/v1/nodes/n", 0, "node.get -> 0"),
    ("PATCH", "/api/v1/namespaces/a/pods/p/status", 200, "pod.patch.status"),
    ("GET", "/api/v1", 200, "GET /api/v1"),
])
def test_each_request_of_a_drain_is_counted_under_its_kind(method: str, path: str, status: int, kind: str) -> None:
    assert request_kind(method, path, status) == kind
