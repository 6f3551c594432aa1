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
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

import ujson

from common.http import SYSTEM_TLS, HttpClient, HttpError, TlsFiles
from executor.kube import discovery, pacing

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


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
    """429: retry later, not before ``retry_after`` (seconds, from the Retry-After header)."""

    retry_after: float | None = None


class CredentialsRefused(KubeError):
    """401, 403, or the server's certificate failed TLS verification (status 0): the agent's
    configuration is wrong, the server is not down. Never counted as an outage (no fallback)."""


class PdbRefused(TooManyRequests):
    """429 with a DisruptionBudget cause: an eviction a PodDisruptionBudget does not allow now."""


class Throttled(TooManyRequests):
    """429 without that cause: API Priority and Fairness (or another limiter) shed the request."""


_BY_STATUS = {401: CredentialsRefused, 403: CredentialsRefused, 404: NotFound, 409: Conflict}


def too_large_resource_version(doc: dict[str, Any]) -> bool:
    """The server's own 504: a list "not older than" a version its watch cache has not reached in
    3 s (apiserver/pkg/storage errors.go NewTooLargeResourceVersionError; the cause is missing in
    some versions, the message is not). The server is up and answered: never an outage."""
    return (any(c.get("reason") == "ResourceVersionTooLarge" for c in pacing.status_causes(doc))
            or "Too large resource version" in str(doc.get("message", "")))


class Unreachable(Exception):
    """No answer from the API server (refused, timeout, broken connection)."""


class NotOwnNode(Exception):
    """A call would touch another node or a pod bound elsewhere: refused by the agent itself."""


class EvictionUnsupported(Exception):
    """The server offers no Eviction version this agent can send (``discovery.choose``): the
    eviction is refused by the agent itself, never turned into a plain DELETE."""


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
        self._eviction: discovery.EvictionSupport | None = None
        # Every request and its status (0: no answer), for a bench or test counting the agent's load.
        self.on_request: Callable[[str, str, int], None] | None = None

    def close(self) -> None:
        self.http.close()
        if self.taint_http is not self.http:
            self.taint_http.close()

    def _count(self, method: str, path: str, status: int) -> None:
        if self.on_request is not None:
            self.on_request(method, path, status)

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
            self._count(method, path, 0)
            if e.cause == "tls":
                raise CredentialsRefused(0, "TLSVerificationFailed", f"{method} {path}: {e.detail}"[:500]) from None
            raise Unreachable(f"{method} {path}: {e}") from None
        return self.settle(method, path, resp.status, resp.headers, resp.body, ok)

    def settle(self, method: str, path: str, status: int, headers: dict[str, str], body: bytes,
               ok: tuple[int, ...] = (200, 201)) -> dict[str, Any]:
        """What an answer means: its Status document if ``status`` is in ``ok``, else the error raised
        (counted either way). Also for an answer read by the drain's loop (``drain_io``)."""
        self._count(method, path, status)
        try:
            doc = ujson.loads(body) if body else {}
        except ValueError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        if status in ok:
            return doc
        raise self._error_for(status, doc, body, headers, f"{method} {path}")

    def wire(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> bytes:
        """The bytes of one request as the node identity, for a connection of the drain's loop."""
        h = self.http
        default = 443 if h.scheme == "https" else 80
        lines = [f"{method} {h.prefix}{path} HTTP/1.1",
                 f"Host: {h.host}" + ("" if h.port == default else f":{h.port}"), *(f"{k}: {v}" for k, v in self.headers.items())]
        data = b""
        if body is not None:
            data = ujson.dumps(body).encode()
            lines.append(f"Content-Type: {content_type}")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(data)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data

    @staticmethod
    def _error_for(status: int, doc: dict[str, Any], body: bytes, headers: dict[str, str],
                   what: str = "") -> Exception:
        """The exception for an error answer (``doc``: its Status, {} if it was not one)."""
        if status in (502, 503, 504) and not too_large_resource_version(doc):
            # A proxy or load balancer in front of a server that is down: no answer, not a refusal.
            return Unreachable(f"{what}: HTTP {status}")
        causes = tuple(str(c.get("message", ""))[:300] for c in pacing.status_causes(doc))
        if status == 429:
            # 1.20's APF rejection is plain text ("Too many requests, please try again later."),
            # so the body's own words stand in for a Status message.
            throttled = pacing.classify_429(doc) == pacing.THROTTLED
            err: TooManyRequests = (Throttled if throttled else PdbRefused)(
                429, str(doc.get("reason", "TooManyRequests")),
                str(doc.get("message", "") or body[:200].decode("utf-8", "replace").strip())[:500], causes)
            err.retry_after = pacing.retry_after_s(headers.get("retry-after"))
            return err
        cls = _BY_STATUS.get(status, KubeError)
        return cls(status, str(doc.get("reason", "")), str(doc.get("message", ""))[:500], causes)

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

    def patch_node_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A strategic-merge patch of the Node's ``status`` (its conditions), on the ``nodes/status``
        subresource, as the node identity -- the Node authorizer grants a node ``nodes/status``
        patch, and NodeRestriction confines it to its own Node (executor.kube.conditions)."""
        if name != self.node:
            raise NotOwnNode(f"refusing to patch node {name!r}: this agent is {self.node!r}")
        return self._call("PATCH", f"/api/v1/nodes/{quote(self.node)}/status", patch, SMP)

    # -- pods on the node -------------------------------------------------------
    def list_pods(self, resource_version: str = "") -> list[dict[str, Any]]:
        """Every pod bound to this node, following pagination (see ``list_pods_at``)."""
        return self.list_pods_at(resource_version)[0]

    def list_pods_at(self, resource_version: str = "", not_older_than: bool = False) -> tuple[list[dict[str, Any]], str]:
        """Every pod bound to this node and the list's resourceVersion (to start a watch from).

        ``resource_version`` "0": served from the API server's watch cache, no etcd read (the
        server then ignores limit and answers in one page); "": a consistent read from etcd.
        ``not_older_than`` with a version: from the watch cache once it has caught up with that
        version (``resourceVersionMatch=NotOlderThan``, 1.19+), at most 3 s later, else a 504 "Too
        large resource version"; asked without ``limit``, as the server's cacher sends a list with a
        limit and a version other than "0" to etcd (apiserver/pkg/storage/cacher ``GetToList``)."""
        pods: list[dict[str, Any]] = []
        cont = ""
        selector = quote(f"spec.nodeName={self.node}")
        rv = f"&resourceVersion={quote(resource_version)}" if resource_version else ""
        limit = "&limit=500"
        if not_older_than and resource_version:
            rv += "&resourceVersionMatch=NotOlderThan"
            limit = ""
        while True:
            path = f"/api/v1/pods?fieldSelector={selector}{limit}{rv}"
            if cont:
                path += f"&continue={quote(cont)}"
            doc = self._call("GET", path)
            # Trust, but verify: a server ignoring the selector must not make us evict elsewhere.
            pods.extend(pod for pod in doc.get("items") or [] if pod_node(pod) == self.node)
            meta = doc.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                return pods, str(meta.get("resourceVersion") or "")
            rv = ""   # a continue token carries its own resourceVersion

    def pods_watch(self, resource_version: str, timeout_s: int) -> str:
        """The path of a watch of this node's pods after ``resource_version`` (served by the drain's loop, ``drain_io``)."""
        return watch_at(f"/api/v1/pods?watch=1&fieldSelector={quote(f'spec.nodeName={self.node}')}",
                        resource_version, timeout_s)

    def pdbs_watch(self, namespace: str, resource_version: str, timeout_s: int) -> str:
        """The path of a watch of one namespace's PodDisruptionBudgets (as ``pods_watch``)."""
        version = self.eviction_support().version or "v1"
        return watch_at(f"/apis/policy/{version}/namespaces/{quote(namespace)}/poddisruptionbudgets?watch=1",
                        resource_version, timeout_s)

    def get_pdb(self, namespace: str, name: str) -> dict[str, Any]:
        """One PodDisruptionBudget, a consistent read (no resourceVersion: 1.20's cacher ``Get``
        reads the one key from etcd). Raises NotFound when it is gone."""
        version = self.eviction_support().version or "v1"
        return self._call("GET", f"/apis/policy/{version}/namespaces/{quote(namespace)}"
                                 f"/poddisruptionbudgets/{quote(name)}")

    def list_pdbs(self, namespaces: Iterable[str]) -> list[dict[str, Any]]:
        """The PodDisruptionBudgets of these namespaces only (those of the node's pods), 100 a page.
        KubeError 403 when the identity may not read them: the plan then guesses from pod owners."""
        return [p for ns in sorted(set(namespaces)) for p in self.list_pdbs_at(ns)[0]]

    def list_pdbs_at(self, namespace: str) -> tuple[list[dict[str, Any]], str]:
        """One namespace's PodDisruptionBudgets, 100 a page, and the list's resourceVersion (to
        watch their status from: ``pdbs_watch``)."""
        version = self.eviction_support().version or "v1"
        out: list[dict[str, Any]] = []
        cont = ""
        while True:
            path = f"/apis/policy/{version}/namespaces/{quote(namespace)}/poddisruptionbudgets?limit=100"
            if cont:
                path += f"&continue={quote(cont)}"
            doc = self._call("GET", path)
            out.extend(p for p in doc.get("items") or [] if isinstance(p, dict))
            meta = doc.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                return out, str(meta.get("resourceVersion") or "")

    def eviction_support(self) -> discovery.EvictionSupport:
        """The policy/* version of the Eviction subresource, from discovery (``discovery.choose``):
        'v1' on 1.22+, 'v1beta1' on older servers; for a version this agent does not know, the
        newest it knows that the policy group still serves; else a refusal. Asked once per client
        (and shared: ``share_discovery``); a discovery call that fails is asked again next time."""
        if self._eviction is None:
            listed = discovery.listed_eviction(self._call("GET", "/api/v1"))
            group = None
            if discovery.needs_group(listed):
                try:
                    group = self._call("GET", f"/apis/{discovery.POLICY_GROUP}")
                except NotFound:
                    group = None   # no policy group at all: nothing to send
            self._eviction = discovery.choose(listed, group)
        return self._eviction

    def share_discovery(self, other: KubeApi) -> None:
        """Take what ``other`` (a client of the same server) already discovered: one GET /api/v1
        per drain, not one per worker thread."""
        if self._eviction is None:
            self._eviction = other._eviction

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
        Conflict (that pod is gone), KubeError, Unreachable, NotOwnNode, EvictionUnsupported (no
        version this agent can send: never a plain DELETE in its place, which would bypass PDBs)."""
        self._call(*self.pod_call("evict", pod, grace_s))

    def delete_pod(self, pod: dict[str, Any], grace_s: int | None = None) -> None:
        """DELETE the pod, bypassing its PDB (the contract's pdb_blocked = delete)."""
        self._call(*self.pod_call("delete", pod, grace_s))

    def pod_call(self, op: str, pod: dict[str, Any], grace_s: int | None) -> tuple[str, str, dict[str, Any]]:
        """(method, path, body) of ``op`` (evict | delete) on a pod of this node: the checks of
        ``evict_pod`` / ``delete_pod`` (raises NotOwnNode, EvictionUnsupported), not the call."""
        ns, name, uid = self._own_pod(pod)
        if op == "delete":
            body = {"apiVersion": "v1", "kind": "DeleteOptions", **self._delete_options(uid, grace_s)}
            return "DELETE", f"/api/v1/namespaces/{quote(ns)}/pods/{quote(name)}", body
        support = self.eviction_support()
        if support.refused:
            raise EvictionUnsupported(support.why)
        body = {"apiVersion": f"policy/{support.version}", "kind": "Eviction",
                "metadata": {"name": name, "namespace": ns},
                "deleteOptions": self._delete_options(uid, grace_s)}
        return "POST", f"/api/v1/namespaces/{quote(ns)}/pods/{quote(name)}/eviction", body

    def patch_pod_status(self, pod: dict[str, Any], patch: dict[str, Any]) -> None:
        """A strategic-merge patch of the pod's ``status`` (a condition) on ``pods/status``, as the node
        identity: NodeRestriction lets a node update the status of the pods bound to it only
        ("node %q can only update pod status for pods with spec.nodeName set to itself")."""
        self._call(*self.pod_status_call(pod, patch), SMP)

    def pod_status_call(self, pod: dict[str, Any], patch: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        """(method, path, body) of ``patch_pod_status`` (raises NotOwnNode), not the call: also for
        the drain's loop (``drain_io``), which sends it as a strategic-merge patch (``SMP``)."""
        ns, name, uid = self._own_pod(pod)
        # The UID in the patch pins it to this pod: metadata.uid is immutable, so a pod recreated
        # under the name refuses the patch (422; 409 from a server that checks it as a precondition).
        pinned = {**patch, "metadata": {**(patch.get("metadata") or {}), "uid": uid}}
        return "PATCH", f"/api/v1/namespaces/{quote(ns)}/pods/{quote(name)}/status", pinned


def watch_at(path: str, resource_version: str, timeout_s: int) -> str:
    """A watch path from ``resource_version``, ended by the server after ``timeout_s``, with bookmarks."""
    return (f"{path}&resourceVersion={quote(resource_version)}&timeoutSeconds={int(timeout_s)}"
            "&allowWatchBookmarks=true")


def _ca_of(tls: ssl.SSLContext | TlsFiles) -> str:
    """The CA file of ``tls`` when it names one (a shared context carries no file name: the factory
    passes the taint identity's own context instead)."""
    return tls.ca_file if isinstance(tls, TlsFiles) else ""
