"""The test-control API under ``/_emu/`` (JSON in, JSON out).

Endpoints:
- ``GET  /_emu/health``                       -> {"ok", "port", "control_port", "resourceVersion"}
- ``POST /_emu/seed {"objects": [...]}``      -> {"created": [{"kind","namespace","name","uid"}]};
  objects are created as stored state (status kept, namespaces auto-created), then the
  controllers run once so PDB status and pod phases are settled before the call returns.
- ``POST /_emu/reset``                        -> fresh cluster, no faults, empty log, start settings
- ``GET  /_emu/log?since=SEQ``                -> {"entries": [...], "last": SEQ}; ``DELETE`` clears
- ``GET|POST|DELETE /_emu/faults``, ``DELETE /_emu/faults/ID`` (rule fields: see faults.py)
- ``POST /_emu/down {"mode": "refuse"|"reset", "seconds": N?}``, ``POST /_emu/up``
- ``GET|POST /_emu/options``                  -> settings; POST changes the runtime ones
- ``POST /_emu/tick``                         -> run the simulated controllers once now
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .errors import ApiError
from .options import as_json
from .resources import BY_KIND

if TYPE_CHECKING:
    from .server import KubeApiServer

Reply = tuple[int, dict[str, Any]]


def _error(code: int, message: str) -> Reply:
    return code, {"error": message}


def seed(emu: KubeApiServer, objects: Any) -> list[dict[str, Any]]:
    """Create ``objects`` as they are; ValueError (with the object's index) on a bad one."""
    if not isinstance(objects, list):
        raise TypeError("objects must be a list")
    created = []
    for i, obj in enumerate(objects):
        rt = BY_KIND.get(obj.get("kind", "")) if isinstance(obj, dict) else None
        if rt is None:
            raise ValueError(f"objects[{i}]: kind must be one of {sorted(BY_KIND)}")
        ns = (obj.get("metadata") or {}).get("namespace") or "default"
        try:
            stored = emu.store.create(rt, ns if rt.namespaced else "", obj, seeding=True)
        except ApiError as err:
            raise ValueError(f"objects[{i}]: {err.status['message']}") from None
        meta = stored["metadata"]
        created.append({"kind": rt.kind, "namespace": meta.get("namespace", ""), "name": meta["name"],
                        "uid": meta["uid"]})
    emu.controllers.run_once()
    return created


def _faults(emu: KubeApiServer, method: str, parts: list[str], body: Any) -> Reply:
    if method == "GET" and not parts:
        return 200, {"faults": emu.faults.list()}
    if method == "POST" and not parts:
        return 200, {"id": emu.faults.add(body)}
    if method == "DELETE" and not parts:
        emu.faults.clear()
        return 200, {}
    if method == "DELETE" and len(parts) == 1 and parts[0].isdigit():
        return (200, {}) if emu.faults.remove(int(parts[0])) else _error(404, "no such fault")
    return _error(405, "unsupported method for /_emu/faults")


def handle(emu: KubeApiServer, method: str, path: str, query: dict[str, str], raw: bytes) -> Reply:
    """Dispatch one control request; bad input is a 400 with a message, never a crash."""
    parts = [p for p in path.split("/") if p][1:]
    try:
        body = json.loads(raw) if raw.strip() else {}
    except ValueError as err:
        return _error(400, f"body is not JSON: {err}")
    if not isinstance(body, dict):
        return _error(400, "body must be a JSON object")
    what = parts[0] if parts else ""
    try:
        if what == "health":
            return 200, {"ok": True, "port": emu.port, "control_port": emu.control_port,
                         "resourceVersion": emu.store.resource_version, "down": emu.down_mode}
        if what == "seed" and method == "POST":
            return 200, {"created": seed(emu, body.get("objects"))}
        if what == "reset" and method == "POST":
            emu.reset()
            return 200, {}
        if what == "log" and method == "GET":
            since = int(query.get("since", "0"))
            return 200, {"entries": emu.log.since(since), "last": emu.log.last_seq}
        if what == "log" and method == "DELETE":
            emu.log.clear()
            return 200, {}
        if what == "faults":
            return _faults(emu, method, parts[1:], body)
        if what == "down" and method == "POST":
            seconds = body.get("seconds")
            emu.down(str(body.get("mode", "refuse")), float(seconds) if seconds is not None else None)
            return 200, {"down": emu.down_mode}
        if what == "up" and method == "POST":
            emu.up()
            return 200, {"down": None}
        if what == "options" and method == "GET":
            return 200, as_json(emu.options)
        if what == "options" and method == "POST":
            return 200, as_json(emu.set_options(body))
        if what == "tick" and method == "POST":
            emu.controllers.run_once()
            return 200, {"resourceVersion": emu.store.resource_version}
    except (ValueError, TypeError) as err:
        return _error(400, str(err))
    return _error(404, f"unknown control endpoint: {method} {path}")
