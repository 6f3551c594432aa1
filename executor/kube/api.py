"""Kubernetes REST, for this node only (adapter over common.http).

The agent may touch its own Node and the pods bound to it, nothing else, and
checks that itself whatever its credentials would allow (DESIGN section 8):
node calls work on ``self.node`` only, and every eviction or delete first
checks the pod's ``spec.nodeName`` and carries the pod's UID as a
precondition, so the server refuses it if the name now means another pod.

Not thread-safe (one kept-alive connection per identity): each thread builds its own
(``executor.kube.scheduler.api_factory``), sharing one TLS context per identity.

One identity per request, and per connection: the node identity (a client certificate, or else
a bearer token) and the taint credential (a bearer token over a TLS context with no client
certificate) never travel together. kube-apiserver's authenticator takes the first that
succeeds, x509 before bearer tokens, so a taint request that carried both would be the node's,
and NodeRestriction refuses a node its own taints.
"""
from __future__ import annotations

import ssl
from typing import Any, NamedTuple
from urllib.parse import quote

import ujson

from common.http import SYSTEM_TLS, HttpClient, HttpError, TlsFiles

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
POLICY_VERSIONS = ("v1", "v1beta1")


class KubeError(Exception):
    """The API server answered with an error Status."""

    def __init__(self, status: int, reason: str, message: str, causes: tuple[str, ...] = ()) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.causes = causes   # details.causes[].message, e.g. the PDB a 429 names


class Conflict(KubeError):
    """409: a resourceVersion or UID precondition failed; re-read and retry (or: that pod is gone)."""


class NotFound(KubeError):
    """404: the object does not exist (a pod already gone counts as evicted)."""


class TooManyRequests(KubeError):
    """429: an eviction a PodDisruptionBudget does not allow now; retry later."""


class CredentialsRefused(KubeError):
    """401, 403, or the server's certificate failed TLS verification (status 0): the agent's
    configuration is wrong, the server is not down. Never counted as an outage (no fallback)."""


_BY_STATUS = {401: CredentialsRefused, 403: CredentialsRefused, 404: NotFound, 409: Conflict,
              429: TooManyRequests}


class Unreachable(Exception):
    """No answer from the API server (refused, timeout, broken connection)."""


class NotOwnNode(Exception):
    """A call would touch another node or a pod bound elsewhere: refused by the agent itself."""


class Identity(NamedTuple):
    """Who a connection is: a bearer ``token``, or the client certificate in ``tls`` -- never both."""

    token: str
    tls: TlsFiles


def identities(token: str, taint_token: str, tls: TlsFiles) -> tuple[Identity, Identity | None]:
    """The node identity and the taint identity (None: taints go as the node), from the configured
    credentials (pure). A client certificate, when configured, is the node identity and the node's
    bearer token is not sent with it; the taint token goes over TLS with the CA but no certificate."""
    node = Identity("" if tls.cert_file else token, tls)
    taint = Identity(taint_token, TlsFiles(ca_file=tls.ca_file)) if taint_token else None
    return node, taint


def pod_node(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


class KubeApi:
    """REST calls for one node, as a bearer ``token`` or a client certificate (in ``tls``, e.g.
    the kubelet's: the node identity). ``node_token``: a separate credential for the Node's taints
    only (the service account whose admission policy allows them; see docs/kubernetes.md), sent
    on a connection of its own over ``taint_tls`` -- a context without a client certificate."""

    def __init__(self, api_url: str, node: str, token: str = "", *, node_token: str = "",  # noqa: PLR0913 -- each identity's parts by name
                 timeout_s: float = 5.0, tls: ssl.SSLContext | TlsFiles = SYSTEM_TLS,
                 taint_tls: ssl.SSLContext | TlsFiles | None = None) -> None:
        if token and isinstance(tls, TlsFiles) and tls.cert_file:
            raise ValueError("one identity per connection: a client certificate or a bearer token, not both")
        self.node = node
        self.http = HttpClient(api_url, timeout_s=timeout_s, max_body=16 << 20, tls=tls)
        self.headers = {"Accept": "application/json", "User-Agent": "sco-agent"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.node_headers = dict(self.headers)   # the taint identity's headers
        self.taint_http = self.http
        if node_token:
            self.node_headers["Authorization"] = f"Bearer {node_token}"
            self.taint_http = HttpClient(api_url, timeout_s=timeout_s, max_body=1 << 20,
                                         tls=TlsFiles(ca_file=_ca_of(tls)) if taint_tls is None else taint_tls)
        self._eviction_version: str | None = None

    def close(self) -> None:
        self.http.close()
        if self.taint_http is not self.http:
            self.taint_http.close()

    def _call(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
              ok: tuple[int, ...] = (200, 201), as_taint: bool = False) -> dict[str, Any]:
        """``as_taint``: as the taint identity, over its own connection (one identity per request)."""
        http, headers = (self.taint_http, dict(self.node_headers)) if as_taint else (self.http, dict(self.headers))
        data = None
        if body is not None:
            data = ujson.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            resp = http.request(method, path, headers=headers, body=data)
        except HttpError as e:
            if e.cause == "tls":
                raise CredentialsRefused(0, "TLSVerificationFailed", f"{method} {path}: {e.detail}"[:500]) from None
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
        details = doc.get("details")
        if not isinstance(details, dict):
            details = {}
        causes = tuple(str(c.get("message", ""))[:300] for c in details.get("causes") or []
                       if isinstance(c, dict))
        cls = _BY_STATUS.get(resp.status, KubeError)
        raise cls(resp.status, str(doc.get("reason", "")), str(doc.get("message", ""))[:500], causes)

    # -- the node -----------------------------------------------------------------
    def get_node(self) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/nodes/{quote(self.node)}")

    def patch_node(self, name: str, patch: dict[str, Any], content_type: str = SMP) -> dict[str, Any]:
        """A patch of the Node as the node identity: cordon, annotations, the LB label."""
        if name != self.node:
            raise NotOwnNode(f"refusing to patch node {name!r}: this agent is {self.node!r}")
        return self._call("PATCH", f"/api/v1/nodes/{quote(self.node)}", patch, content_type)

    def patch_node_taints(self, name: str, patch: dict[str, Any], content_type: str = SMP) -> dict[str, Any]:
        """A patch of the Node's taints, as the taint identity on its own connection (as the node
        when there is none: NodeRestriction then refuses it, 403 "not allowed to modify taints")."""
        if name != self.node:
            raise NotOwnNode(f"refusing to patch node {name!r}: this agent is {self.node!r}")
        return self._call("PATCH", f"/api/v1/nodes/{quote(self.node)}", patch, content_type, as_taint=True)

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
            # Trust, but verify: a server ignoring the selector must not make us evict elsewhere.
            pods.extend(pod for pod in doc.get("items") or [] if pod_node(pod) == self.node)
            cont = (doc.get("metadata") or {}).get("continue") or ""
            if not cont:
                return pods

    def list_pdbs(self) -> list[dict[str, Any]]:
        """Every PodDisruptionBudget (for planning only; the server enforces them). KubeError 403
        when the identity may not read them: the plan then guesses from pod owners."""
        version = self.eviction_version() or "v1"
        doc = self._call("GET", f"/apis/policy/{version}/poddisruptionbudgets?limit=500")
        return [p for p in doc.get("items") or [] if isinstance(p, dict)]

    def eviction_version(self) -> str | None:
        """The policy/* version of the Eviction subresource, from discovery of /api/v1 (as kubectl
        does): 'v1' on 1.22+, 'v1beta1' on older servers, None if the server has no eviction."""
        if self._eviction_version is None:
            doc = self._call("GET", "/api/v1")
            found = ""
            for r in doc.get("resources") or []:
                if isinstance(r, dict) and r.get("name") == "pods/eviction":
                    # Servers before 1.x listed no group/version: that is the old policy/v1beta1.
                    found = str(r.get("version") or "v1beta1")
                    break
            self._eviction_version = found if found in POLICY_VERSIONS else "-"
        return None if self._eviction_version == "-" else self._eviction_version

    def _own_pod(self, pod: dict[str, Any]) -> tuple[str, str, str]:
        md = pod.get("metadata") or {}
        ns, name, uid = str(md.get("namespace") or ""), str(md.get("name") or ""), str(md.get("uid") or "")
        if pod_node(pod) != self.node:
            raise NotOwnNode(f"refusing to touch pod {ns}/{name}: bound to {pod_node(pod)!r}, "
                             f"this agent is {self.node!r}")
        if not (ns and name and uid):
            raise NotOwnNode(f"refusing to touch pod {ns}/{name}: no namespace, name or uid to pin it")
        return ns, name, uid

    @staticmethod
    def _delete_options(uid: str, grace_s: int | None) -> dict[str, Any]:
        options: dict[str, Any] = {"preconditions": {"uid": uid}}
        if grace_s is not None:
            options["gracePeriodSeconds"] = grace_s
        return options

    def evict_pod(self, pod: dict[str, Any], grace_s: int | None = None) -> None:
        """POST the Eviction (the server checks the PDB). Raises TooManyRequests (PDB), NotFound or
        Conflict (that pod is gone), KubeError, Unreachable, NotOwnNode."""
        ns, name, uid = self._own_pod(pod)
        version = self.eviction_version()
        if version is None:
            # No eviction subresource (kubectl drain then deletes too): a plain graceful delete.
            self.delete_pod(pod, grace_s)
            return
        body = {"apiVersion": f"policy/{version}", "kind": "Eviction",
                "metadata": {"name": name, "namespace": ns},
                "deleteOptions": self._delete_options(uid, grace_s)}
        self._call("POST", f"/api/v1/namespaces/{quote(ns)}/pods/{quote(name)}/eviction", body)

    def delete_pod(self, pod: dict[str, Any], grace_s: int | None = None) -> None:
        """DELETE the pod, bypassing its PDB (the contract's pdb_blocked = delete)."""
        ns, name, uid = self._own_pod(pod)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **self._delete_options(uid, grace_s)}
        self._call("DELETE", f"/api/v1/namespaces/{quote(ns)}/pods/{quote(name)}", body)


def _ca_of(tls: ssl.SSLContext | TlsFiles) -> str:
    """The CA file of ``tls`` when it names one (a shared context carries no file name: the factory
    passes the taint identity's own context instead)."""
    return tls.ca_file if isinstance(tls, TlsFiles) else ""
