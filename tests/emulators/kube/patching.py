"""The three PATCH flavours the API server accepts, as pure functions over JSON values.

- strategic merge (``application/strategic-merge-patch+json``): maps merge, ``null`` deletes,
  lists are replaced whole unless the field has a merge key (conditions and addresses by
  ``type``, containers by ``name``...). ``NodeSpec.Taints`` and tolerations have NO patch
  strategy, so a taint list in a patch replaces the node's list: that is why ``kubectl taint``
  sends the complete list, and why two writers race.
- JSON merge patch (RFC 7386, ``application/merge-patch+json``): lists always replaced.
- JSON patch (RFC 6902, ``application/json-patch+json``): ops; a failing ``test`` is an error.

Merge keys are looked up by field name, not by full type path: good enough for the pod, node,
PDB and DaemonSet shapes the emulator serves.
"""
from __future__ import annotations

import copy
from typing import Any

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PATCH_TYPES = (JSON_PATCH, MERGE, STRATEGIC)

MERGE_KEYS = {
    "conditions": "type", "addresses": "type", "containers": "name", "initContainers": "name",
    "ephemeralContainers": "name", "volumes": "name", "env": "name", "ports": "containerPort",
    "volumeMounts": "mountPath", "volumeDevices": "devicePath", "ownerReferences": "uid",
    "imagePullSecrets": "name", "hostAliases": "ip", "podIPs": "ip", "hostIPs": "ip",
    "resourceClaims": "name",
}
PRIMITIVE_MERGE_LISTS = frozenset({"finalizers", "podCIDRs"})


class PatchError(Exception):
    """A patch that cannot apply (422); ``bad_request`` marks a malformed one (400)."""

    def __init__(self, message: str, bad_request: bool = False) -> None:
        super().__init__(message)
        self.bad_request = bad_request


def _strip(value: Any) -> Any:
    """A patch value used as new content: drop directives and nulls inside it."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "delete")]
    return value


def _merge_list(field: str, orig: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_strip(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    if field in PRIMITIVE_MERGE_LISTS:
        return list(orig) + [p for p in patch if p not in orig]
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(p, dict) for p in patch):
        return _strip(patch)
    result = [copy.deepcopy(o) for o in orig]
    for item in patch:
        if key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        index = next((i for i, o in enumerate(result) if isinstance(o, dict) and o.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(_strip(item))
        else:
            result[index] = _merge_map(result[index], item)
    return result


def _merge_map(orig: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    if patch.get("$patch") == "replace":
        return _strip(patch)
    result = copy.deepcopy(orig)
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in (value or [])]
        elif key.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys, $patch: order hints and handled above
        elif value is None or (isinstance(value, dict) and value.get("$patch") == "delete"):
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge_map(result[key], value)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(key, result[key], value)
        else:
            result[key] = _strip(value)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def strategic_merge(original: dict[str, Any], patch: Any) -> dict[str, Any]:
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object", bad_request=True)
    return _merge_map(original, patch)


def merge_patch(original: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"invalid array index {token!r} in {path}")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise PatchError(f"array index out of bounds: {path}")
    return index


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("operation on the document root is not supported")
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict) and token in cur:
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, path, False)]
        else:
            raise PatchError(f"doc is missing path: {path}: missing value")
    return cur, tokens[-1]


def _get(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"doc is missing key: {path}: missing value")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path, False)]
    raise PatchError(f"doc is missing path: {path}: missing value")


def _remove(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"remove operation does not apply: doc is missing key: {path}: missing value")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, path, False))
    raise PatchError(f"remove operation does not apply: doc is missing path: {path}")


def _add(doc: Any, path: str, value: Any) -> None:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, True), value)
    else:
        raise PatchError(f"add operation does not apply: doc is missing path: {path}: missing value")


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: unlike Python ``==``, ``true`` is not ``1`` and ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def json_patch(original: Any, ops: Any) -> Any:
    """RFC 6902; any failure (including a failing ``test``) raises PatchError."""
    if not isinstance(ops, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", bad_request=True)
    doc = copy.deepcopy(original)
    for op in ops:
        if not isinstance(op, dict) or "path" not in op:
            raise PatchError(f"malformed JSON patch operation: {op!r}", bad_request=True)
        kind, path = op.get("op"), op["path"]
        if kind == "add":
            _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # must exist
            _remove(doc, path)
            _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            value = _remove(doc, op.get("from", "")) if kind == "move" else copy.deepcopy(_get(doc, op.get("from", "")))
            _add(doc, path, value)
        elif kind == "test":
            try:
                current = _get(doc, path)
            except PatchError as err:
                raise PatchError(f"testing value {path} failed: {err}") from None
            if not json_equal(current, op.get("value")):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}", bad_request=True)
    return doc


def apply_patch(content_type: str, original: dict[str, Any], patch: Any) -> Any:
    """Dispatch on the (parameter-free) content type; callers reject unknown types with 415."""
    if content_type == STRATEGIC:
        return strategic_merge(original, patch)
    if content_type == MERGE:
        return merge_patch(original, patch)
    if content_type == JSON_PATCH:
        return json_patch(original, patch)
    raise ValueError(content_type)
