"""Kubernetes REST, for this node only (adapter over common.http).

The agent may touch its own Node and the pods bound to it, nothing else, and
checks that itself whatever its credentials would allow (DESIGN section 8):
every method works on ``self.node`` and pod calls verify ``spec.nodeName``.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

import ujson

from common.http import HttpClient, HttpError

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeError(Exception):
    """The API server answered with an error Status."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class Conflict(KubeError):
    """409: our resourceVersion precondition failed; re-read and retry."""


class Unreachable(Exception):
    """No answer from the API server (refused, timeout, broken connection)."""


class NotOwnNode(Exception):
    """A call would touch another node or a pod bound elsewhere: refused by the agent itself."""


class KubeApi:
    def __init__(self, api_url: str, node: str, token: str = "", ca_file: str = "",
                 timeout_s: float = 5.0) -> None:
        self.node = node
        self.http = HttpClient(api_url, timeout_s=timeout_s, max_body=16 << 20, ca_file=ca_file)
        self.headers = {"Accept": "application/json", "User-Agent": "sco-agent"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def _call(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
              ok: tuple[int, ...] = (200, 201)) -> dict[str, Any]:
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = ujson.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            resp = self.http.request(method, path, headers=headers, body=data)
        except HttpError as e:
            raise Unreachable(f"{method} {path}: {e}") from None
        try:
            doc = ujson.loads(resp.body) if resp.body else {}
        except ValueError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        if resp.status in ok:
            return doc
        if resp.status in (502, 503, 504):
            # A proxy or load balancer in front of a server that is down: no answer, not a refusal.
            raise Unreachable(f"{method} {path}: HTTP {resp.status}")
        cls = Conflict if resp.status == 409 else KubeError
        raise cls(resp.status, str(doc.get("reason", "")), str(doc.get("message", ""))[:500])

    # -- the node -----------------------------------------------------------------
    def get_node(self) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/nodes/{quote(self.node)}")

    def patch_node(self, name: str, patch: dict[str, Any], content_type: str = SMP) -> dict[str, Any]:
        if name != self.node:
            raise NotOwnNode(f"refusing to patch node {name!r}: this agent is {self.node!r}")
        return self._call("PATCH", f"/api/v1/nodes/{quote(self.node)}", patch, content_type)

    # -- pods on the node -------------------------------------------------------
    def list_pods(self) -> list[dict[str, Any]]:
        """Every pod bound to this node, following pagination."""
        pods: list[dict[str, Any]] = []
        cont = ""
        selector = quote(f"spec.nodeName={self.node}")
        while True:
            path = f"/api/v1/pods?fieldSelector={selector}&limit=500"
            if cont:
                path += f"&continue={quote(cont)}"
            doc = self._call("GET", path)
            for pod in doc.get("items") or []:
                # Trust, but verify: a server ignoring the selector must not make us evict elsewhere.
                if (pod.get("spec") or {}).get("nodeName") == self.node:
                    pods.append(pod)
            cont = (doc.get("metadata") or {}).get("continue") or ""
            if not cont:
                return pods
