"""Just enough OpenAPI v3 for kubectl to choose server-side field validation.

``kubectl create -f`` (validate=strict) looks in ``/openapi/v3/<group-version>`` for a PATCH
operation tagged with the object's GroupVersionKind that takes a ``fieldValidation`` query
parameter; when found it sends ``fieldValidation=Strict`` and needs no schema. Without it
kubectl wants the full OpenAPI v2 schema and fails. No schemas are served.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from .resources import group_versions, resources_in

_GROUPS = ("", "apps", "policy")


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def gv_document(group: str, version: str, policy_versions: tuple[str, ...]) -> dict[str, Any] | None:
    """The (schema-less) OpenAPI v3 document of one group-version; None if not served."""
    types = resources_in(group, version, policy_versions)
    if not types:
        return None
    paths: dict[str, Any] = {}
    for rt in types:
        base = f"/{_gv_path(group, version)}"
        item = f"{base}/namespaces/{{namespace}}/{rt.name}/{{name}}" if rt.namespaced else f"{base}/{rt.name}/{{name}}"
        gvk = {"group": group, "version": version, "kind": rt.kind}
        params = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                  {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}}]
        paths[item] = {"patch": {"operationId": f"patch{rt.kind}", "parameters": params,
                                 "x-kubernetes-group-version-kind": gvk,
                                 "x-kubernetes-action": "patch", "responses": {}}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "emulator"}, "paths": paths}


def index(policy_versions: tuple[str, ...]) -> dict[str, Any]:
    """``GET /openapi/v3``: one entry per served group-version, with a content hash."""
    paths = {}
    for group in _GROUPS:
        for version in group_versions(group, policy_versions):
            doc = gv_document(group, version, policy_versions)
            if doc is not None:
                digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
                paths[_gv_path(group, version)] = {
                    "serverRelativeURL": f"/openapi/v3/{_gv_path(group, version)}?hash={digest}"}
    return {"paths": paths}


def document_for(path_parts: list[str], policy_versions: tuple[str, ...]) -> dict[str, Any] | None:
    """Resolve ``/openapi/v3/...`` path parts (after ``openapi/v3``) to a document."""
    if not path_parts:
        return index(policy_versions)
    if path_parts[0] == "api" and len(path_parts) == 2:
        return gv_document("", path_parts[1], policy_versions)
    if path_parts[0] == "apis" and len(path_parts) == 3:
        return gv_document(path_parts[1], path_parts[2], policy_versions)
    return None
