"""node_steps.cordon_and_taint: the condition's and the taint's patches start from the last write's
answer, not a GET -- and a Node another writer changed in between is read again (409), never
overwritten (every patch pins the resourceVersion it was computed from)."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from executor.kube import node_steps
from executor.kube.api import Conflict

NODE = "node-a"


class FakeNodeApi:
    """The Node object alone, as the API server keeps it: a resourceVersion bumped by every write,
    a patch that names another one refused with 409."""

    def __init__(self) -> None:
        self.node = NODE
        self.obj: dict[str, Any] = {"metadata": {"name": NODE, "resourceVersion": "1", "annotations": {}},
                                    "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]},
                                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        self.gets = 0
        self.after_write: Callable[[str], None] = lambda kind: None

    def get_node(self) -> dict[str, Any]:
        self.gets += 1
        return copy.deepcopy(self.obj)

    def _write(self, kind: str, patch: dict[str, Any], apply: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        pinned = (patch.get("metadata") or {}).get("resourceVersion")
        if pinned and pinned != self.obj["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        apply(patch)
        self.bump()
        answer = copy.deepcopy(self.obj)
        self.after_write(kind)
        return answer

    def bump(self) -> None:
        md = self.obj["metadata"]
        md["resourceVersion"] = str(int(md["resourceVersion"]) + 1)

    def _merge(self, patch: dict[str, Any]) -> None:
        self.obj["metadata"]["annotations"].update((patch.get("metadata") or {}).get("annotations") or {})
        self.obj["spec"].update(patch.get("spec") or {})

    def patch_node(self, name: str, patch: dict[str, Any], content_type: str = "") -> dict[str, Any]:
        return self._write("node", patch, self._merge)

    def patch_node_taints(self, name: str, patch: dict[str, Any], content_type: str = "") -> dict[str, Any]:
        return self._write("taints", patch, self._merge)

    def patch_node_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        def apply(p: dict[str, Any]) -> None:
            kept = [c for c in self.obj["status"]["conditions"]
                    if c["type"] not in {n["type"] for n in p["status"]["conditions"]}]
            self.obj["status"]["conditions"] = kept + p["status"]["conditions"]
        return self._write("status", patch, apply)


def cordon(api: FakeNodeApi) -> dict[str, Any]:
    return node_steps.cordon_and_taint(api, "sco.io/notice", "reclaim", "n-1", "2030-01-01T00:00:00Z",  # type: ignore[arg-type]
                                       clock=lambda: 1_900_000_000.0)


def own_taint(api: FakeNodeApi) -> list[dict[str, Any]]:
    return [t for t in api.obj["spec"]["taints"] if t["key"] == "sco.io/notice"]


def test_the_cordon_the_condition_and_the_taint_read_the_node_once():
    api = FakeNodeApi()
    done = cordon(api)
    assert done["tainted"] and done["condition_patched"] and api.gets == 1
    assert own_taint(api) and api.obj["spec"]["unschedulable"] is True
    assert {"key": "other", "effect": "NoSchedule"} in api.obj["spec"]["taints"]


def test_a_node_changed_between_the_condition_and_the_taint_is_read_again_and_its_change_kept():
    api = FakeNodeApi()

    def someone_else(kind: str) -> None:   # e.g. an operator's taint, right after our condition
        if kind == "status":
            api.obj["spec"]["taints"] = [*api.obj["spec"]["taints"], {"key": "operator", "effect": "NoExecute"}]
            api.bump()
    api.after_write = someone_else
    done = cordon(api)
    assert done["tainted"] and api.gets == 2   # the 409 made the taint read the Node again
    keys = [t["key"] for t in api.obj["spec"]["taints"]]
    assert keys.count("sco.io/notice") == 1 and "operator" in keys and "other" in keys
