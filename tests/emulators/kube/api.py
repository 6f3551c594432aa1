"""The Kubernetes REST API proper: routing, discovery, CRUD, PATCH, lists, eviction.

``Api.handle`` takes a parsed ``Request`` and returns a ``Reply`` or, for a watch, a
``WatchRequest`` the HTTP layer streams. No sockets here, so every rule is testable directly.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.emulators._http import Request

from . import errors, node_identity, openapi, protobuf, resources, table
from .errors import (
    ApiError,
    bad_request,
    method_not_allowed,
    path_not_found,
    success_status,
)
from .options import Options
from .patching import PATCH_TYPES, PatchError, apply_patch
from .policy import disruption_target_condition, plan_eviction
from .resources import NODES, PDBS, PODS, ResourceType, api_version_of
from .selectors import make_filter, parse_field_selector, parse_label_selector
from .store import Store
from .strategy import TERMINAL_PHASES, check_preconditions
from .watch import WatchRequest, present

DEFAULT_WATCH_TIMEOUT = 1800.0
TOO_LARGE_RV_WAIT_S = 3.0   # the watch cache's wait for a version it has not reached (cacher.go)


@dataclass
class Reply:
    """An API answer before encoding; the HTTP layer adds the server's standard headers."""

    code: int
    body: Any  # dict/list: JSON; str: text/plain
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    rt: ResourceType
    version: str
    namespace: str | None  # None: cluster-scoped, or all namespaces
    name: str | None
    subresource: str


def _json_body(req: Request, required: bool = True, patch: bool = False) -> Any:
    ctype = req.headers.get("content-type", "").split(";")[0].strip().lower()
    if not patch and ctype == protobuf.CONTENT_TYPE and req.body:
        try:
            return protobuf.decode(req.body)
        except ValueError:
            # Only the protobuf messages kubectl sends are decoded (see protobuf.py).
            raise errors.unsupported_media(("application/json",)) from None
    if not patch and ctype not in ("", "application/json", "*/*"):
        raise errors.unsupported_media(("application/json",))
    if not req.body.strip():
        if required:
            raise bad_request("the request body is empty")
        return {}
    try:
        return json.loads(req.body)
    except (ValueError, UnicodeDecodeError) as err:
        raise bad_request(f"error decoding request body: {err}") from None


def _dry_run(req: Request) -> bool:
    value = req.query.get("dryRun", "")
    if value not in ("", "All"):
        raise bad_request(f'Invalid dry run value: "{value}"')
    return value == "All"


def _continue_token(rv: int, ns: str, name: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{ns}/{name}\u0000"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _parse_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        ns, _, name = raw["start"].rstrip("\u0000").partition("/")
        return int(raw["rv"]), (ns, name)
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        raise bad_request(f"continue key is not valid: {token[:64]}") from None


class Api:
    """Serves the REST API over one store."""

    def __init__(self, store: Store, options: Callable[[], Options], server_address: Callable[[], str],
                 clock: Callable[[], float]) -> None:
        self._store = store
        self._options = options
        self._address = server_address
        self._clock = clock

    # ----- routing -----
    def handle(self, req: Request, user: str | None = None) -> Reply | WatchRequest:
        """``user``: who the request authenticated as; a node identity (``system:node:<name>``) is
        held to what the Node authorizer and NodeRestriction allow it (``node_identity``)."""
        try:
            return self._route(req, node_identity.node_of(user))
        except ApiError as err:
            return Reply(err.code, err.status, err.headers)

    def _route(self, req: Request, node: str | None = None) -> Reply | WatchRequest:
        parts = [p for p in req.path.split("/") if p]
        pv = self._options().policy_versions
        if req.path in ("/healthz", "/livez", "/readyz"):
            return Reply(200, "ok")
        if parts[:2] == ["openapi", "v3"]:
            return self._discovery(req, openapi.document_for(parts[2:], pv))
        if not parts or parts[0] not in ("api", "apis", "version"):
            raise path_not_found()
        if parts == ["version"]:
            return Reply(200, resources.version_info(self._options().server_version))
        if parts[0] == "api":
            if len(parts) == 1:
                return self._discovery(req, resources.api_versions(self._address()))
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return self._discovery(req, resources.api_group_list(pv))
            if len(parts) == 2:
                return self._discovery(req, resources.api_group(parts[1], pv))
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            return self._discovery(req, resources.resource_list(group, version, pv))
        route = self._resolve(group, version, rest, pv)
        if node is not None and route.name is not None:
            node_identity.check_request(node, req.method, route.rt, route.name, route.subresource,
                                        self._store.find(route.rt, route.namespace or "", route.name))
        return self._dispatch(req, route, node)

    def _discovery(self, req: Request, doc: dict[str, Any] | None) -> Reply:
        if doc is None:
            raise path_not_found()
        if req.method != "GET":
            raise method_not_allowed()
        return Reply(200, doc)

    @staticmethod
    def _resolve(group: str, version: str, rest: list[str], pv: tuple[str, ...]) -> Route:
        types = {rt.name: rt for rt in resources.resources_in(group, version, pv)}
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in types and types[rest[2]].namespaced:
            rt, ns, tail = types[rest[2]], rest[1], rest[3:]
        else:
            found = types.get(rest[0])
            if found is None or (found.namespaced and len(rest) > 1):
                raise path_not_found()
            rt, ns, tail = found, None, rest[1:]
        if len(tail) > 2:
            raise path_not_found()
        sub = tail[1] if len(tail) == 2 else ""
        if sub and not ((sub == "status" and rt.has_status) or (sub == "eviction" and rt is PODS)):
            raise path_not_found()
        return Route(rt, version, ns, tail[0] if tail else None, sub)

    def _dispatch(self, req: Request, r: Route, node: str | None = None) -> Reply | WatchRequest:
        m = req.method
        if r.name is None:
            if m == "GET":
                return self._list(req, r)
            if m == "POST" and (r.namespace is not None or not r.rt.namespaced):
                return self._create(req, r)
        elif r.subresource == "eviction":
            if m == "POST":
                return self._evict(req, r)
        elif m == "GET":
            if req.query.get("watch") in ("1", "true"):  # deprecated watch on one object
                named = dataclasses.replace(req, query={**req.query, "fieldSelector": f"metadata.name={r.name}"})
                return self._list(named, Route(r.rt, r.version, r.namespace, None, ""))
            obj = self._store.get(r.rt, r.namespace or "", r.name)
            if table.wants_table(req.headers.get("accept", "")):
                return Reply(200, table.to_table(r.rt, r.version, [obj], {"resourceVersion": obj[
                    "metadata"]["resourceVersion"]}, self._clock(), req.query.get("includeObject", "")))
            return self._ok(r, obj)
        elif m == "PUT":
            body = _json_body(req)
            self._check_kind(r, body)

            def put(cur: dict[str, Any]) -> dict[str, Any]:
                if node is not None and r.rt is NODES and not r.subresource:
                    node_identity.check_taints(node, cur, body)
                return body

            return self._ok(r, self._store.mutate(r.rt, r.namespace or "", r.name, put,
                                                  subresource=r.subresource, dry_run=_dry_run(req)))
        elif m == "PATCH":
            return self._patch(req, r, node)
        elif m == "DELETE" and not r.subresource:
            return self._delete(req, r)
        raise method_not_allowed()

    def _ok(self, r: Route, obj: dict[str, Any], code: int = 200) -> Reply:
        return Reply(code, present(r.rt, r.version, obj))

    @staticmethod
    def _check_kind(r: Route, body: Any) -> None:
        if not isinstance(body, dict):
            raise bad_request("the body must be a JSON object")
        kind = body.get("kind")
        if kind and kind != r.rt.kind:
            raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({r.rt.kind})")

    # ----- verbs -----
    def _selectors(self, req: Request, r: Route) -> Callable[[dict[str, Any]], bool]:
        try:
            labels = parse_label_selector(req.query.get("labelSelector", ""))
            fields = parse_field_selector(req.query.get("fieldSelector", ""), r.rt.field_labels)
        except ValueError as err:
            raise bad_request(str(err)) from None
        return make_filter(r.namespace, labels, fields)

    def _list(self, req: Request, r: Route) -> Reply | WatchRequest:
        accept = self._selectors(req, r)
        if req.query.get("watch") in ("1", "true"):
            return self._watch(req, r, accept)
        self._check_version_match(req)
        self._wait_until_fresh(req)
        items, rv = self._store.snapshot(r.rt, accept)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if req.query.get("continue"):
            rv, start = _parse_continue(req.query["continue"])
            meta["resourceVersion"] = str(rv)
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start]
        limit = req.query.get("limit", "")
        if limit:
            try:
                n = int(limit)
            except ValueError:
                raise bad_request(f"limit must be an integer: {limit!r}") from None
            if n > 0 and len(items) > n:
                last = items[n - 1]["metadata"]
                meta["continue"] = _continue_token(rv, last.get("namespace", ""), last["name"])
                if not req.query.get("labelSelector") and not req.query.get("fieldSelector"):
                    meta["remainingItemCount"] = len(items) - n
                items = items[:n]
        if table.wants_table(req.headers.get("accept", "")):
            return Reply(200, table.to_table(r.rt, r.version, items, meta, self._clock(),
                                                req.query.get("includeObject", "")))
        return Reply(200, {"kind": f"{r.rt.kind}List", "apiVersion": api_version_of(r.rt, r.version),
                              "metadata": meta, "items": items})

    @staticmethod
    def _check_version_match(req: Request) -> None:
        """A list's resourceVersionMatch as the server validates it (apimachinery's
        ValidateListOptions): 422 unless a resourceVersion is given, or with a continue token, or
        Exact with "0". The store is always current, so NotOlderThan any version it has is now."""
        match = req.query.get("resourceVersionMatch", "")
        if not match:
            return
        rv = req.query.get("resourceVersion", "")
        why = ("resourceVersionMatch is forbidden unless resourceVersion is provided" if not rv else
               "resourceVersionMatch is forbidden when continue is provided" if req.query.get("continue") else
               "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"" if match == "Exact" and rv == "0" else
               f"{match}: unsupported value" if match not in ("NotOlderThan", "Exact") else "")
        if why:
            raise errors.invalid("ListOptions", "meta.k8s.io", "", [{
                "reason": "FieldValueForbidden", "field": "resourceVersionMatch", "message": f"Forbidden: {why}"}])

    def _wait_until_fresh(self, req: Request) -> None:
        """A list not older than a version the store has not reached: the server's watch cache
        waits up to 3 s for it, then answers 504 Timeout "Too large resource version" with the
        ResourceVersionTooLarge cause and Retry-After 1 (apiserver/pkg/storage errors.go
        NewTooLargeResourceVersionError; cacher waitUntilFreshAndBlock)."""
        rv = req.query.get("resourceVersion", "")
        if req.query.get("resourceVersionMatch") != "NotOlderThan" or not rv.isdigit():
            return
        wanted, deadline = int(rv), time.monotonic() + TOO_LARGE_RV_WAIT_S
        while self._store.resource_version < wanted:
            if time.monotonic() >= deadline:
                raise errors.ApiError(errors.status_body(
                    504, f"Timeout: Too large resource version: {wanted}, current: {self._store.resource_version}",
                    details={"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                             "retryAfterSeconds": 1}))
            time.sleep(0.05)

    def _watch(self, req: Request, r: Route, accept: Callable[[dict[str, Any]], bool]) -> WatchRequest:
        rv = req.query.get("resourceVersion", "")
        if rv and not rv.isdigit():
            raise bad_request(f'invalid resource version: "{rv}"')
        initial = req.query.get("sendInitialEvents") == "true"
        if initial and (req.query.get("resourceVersionMatch") != "NotOlderThan"
                        or req.query.get("allowWatchBookmarks") != "true"):
            raise errors.invalid("ListOptions", "meta.k8s.io", "", [{
                "reason": "FieldValueForbidden", "field": "sendInitialEvents",
                "message": "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                           "NotOlderThan and allowWatchBookmarks to true"}])
        try:
            timeout = float(req.query.get("timeoutSeconds", DEFAULT_WATCH_TIMEOUT))
        except ValueError:
            raise bad_request("timeoutSeconds must be a number") from None
        timeout = min(timeout, float(self._options().watch_cut.get(r.rt.name, timeout)))
        as_table = table.wants_table(req.headers.get("accept", ""))
        return WatchRequest(r.rt, r.version, accept, rv, timeout, initial,
                            req.query.get("includeObject", "") if as_table else None)

    def _create(self, req: Request, r: Route) -> Reply:
        body = _json_body(req)
        self._check_kind(r, body)
        obj = self._store.create(r.rt, r.namespace or "", body, dry_run=_dry_run(req))
        return self._ok(r, obj, 201)

    def _patch(self, req: Request, r: Route, node: str | None = None) -> Reply:
        ctype = req.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype not in PATCH_TYPES:
            raise errors.unsupported_media(PATCH_TYPES)
        patch = _json_body(req, patch=True)

        def change(cur: dict[str, Any]) -> dict[str, Any]:
            try:
                new = apply_patch(ctype, present(r.rt, r.version, cur), patch)
            except PatchError as err:
                raise (bad_request(str(err)) if err.bad_request else errors.unprocessable(str(err))) from None
            if node is not None and r.rt is NODES and not r.subresource:
                node_identity.check_taints(node, cur, new)
            return new

        return self._ok(r, self._store.mutate(r.rt, r.namespace or "", r.name or "", change,
                                              subresource=r.subresource, dry_run=_dry_run(req)))

    def _delete_options(self, req: Request) -> dict[str, Any]:
        options = _json_body(req, required=False)
        if not isinstance(options, dict):
            raise bad_request("DeleteOptions must be a JSON object")
        if "gracePeriodSeconds" in req.query:
            try:
                options["gracePeriodSeconds"] = int(req.query["gracePeriodSeconds"])
            except ValueError:
                raise bad_request("gracePeriodSeconds must be an integer") from None
        return options

    def _delete(self, req: Request, r: Route) -> Reply:
        options = self._delete_options(req)
        dry_run = _dry_run(req) or options.get("dryRun") == ["All"]
        return self._ok(r, self._store.delete(r.rt, r.namespace or "", r.name or "", options, dry_run=dry_run))

    def _evict(self, req: Request, r: Route) -> Reply:
        # The Eviction bodies the handler takes: every served policy version (upstream's
        # EvictionREST.AcceptsGroupVersion takes policy/v1 and policy/v1beta1 while discovery lists
        # policy/v1); another version's body is refused (400), never treated as a delete.
        served = {f"policy/{v}" for v in self._options().policy_versions}
        if not served:
            raise path_not_found()  # a server without the eviction subresource
        body = _json_body(req)
        if not isinstance(body, dict):
            raise bad_request("the body must be an Eviction object")
        if body.get("kind") not in (None, "", "Eviction") or body.get("apiVersion") not in ({None, ""} | served):
            raise bad_request(f'no kind "{body.get("kind")}" is registered for version '
                              f'"{body.get("apiVersion")}" in the Eviction subresource')
        if (body.get("metadata") or {}).get("name") != r.name:
            raise bad_request("name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or {}
        dry_run = _dry_run(req) or options.get("dryRun") == ["All"]
        ns, name, now = r.namespace or "", r.name or "", self._clock()
        with self._store.cond:
            pod = self._store.find(PODS, ns, name)
            if pod is None:
                raise errors.not_found("pods", "", name)
            check_preconditions(pod, options, errors.conflict("pods", "", name))
            pdbs, _ = self._store.snapshot(PDBS, lambda p: p["metadata"]["namespace"] == ns)
            plan = plan_eviction(pod, pdbs, now)
            if dry_run:
                return Reply(201, success_status(201))
            if plan.pdb_name is not None:
                self._store.update(PDBS, ns, plan.pdb_name, {"metadata": {"name": plan.pdb_name},
                                                             "status": plan.pdb_status}, subresource="status")
            status = pod.get("status") or {}
            if status.get("phase") not in TERMINAL_PHASES and not pod["metadata"].get("deletionTimestamp"):
                conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
                marked = {**status, "conditions": conditions + [disruption_target_condition(now)]}
                self._store.update(PODS, ns, name, {"metadata": {"name": name}, "status": marked},
                                   subresource="status")
            self._store.delete(PODS, ns, name, options)
        return Reply(201, success_status(201))
