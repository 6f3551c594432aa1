"""Control helpers for the Kubernetes emulator, the same in-process and as a subprocess.

Every method is one ``/_emu/`` command; the generic ones (faults, request log, down/up)
come from ``ControlClient``. Fault rules match the API path with ``path`` (a prefix) or
``pattern`` (a regex searched in the path with its query string):
``kube.fault("status", pattern="/eviction$", status=429, retry_after=1)``.
"""
from __future__ import annotations

from typing import Any

from tests.emulators._control import ControlClient

from . import objects

# API Priority and Fairness rejecting a request, exactly as kube-apiserver 1.20.2 answers it (pinned
# on the real server by tests/rigs/test_kube_flowschema.py): 429, Content-Type text/plain,
# Retry-After: 1, this body -- no Status object, so no DisruptionBudget cause.
APF_REJECTION_BODY = "Too many requests, please try again later.\n"


class KubeControl(ControlClient):
    """Cluster changes and inspection for a running Kubernetes emulator."""

    def reset(self) -> None:
        """Back to a fresh cluster: objects, faults, log and settings as at start; API port up."""
        self.call("reset")

    def seed(self, *manifests: dict[str, Any]) -> list[dict[str, Any]]:
        """Store objects as given (status kept); controllers settle before this returns.
        Returns ``{"kind", "namespace", "name", "uid"}`` per object."""
        return self.call("seed", {"objects": list(manifests)})

    def throttle(self, *, pattern: str | None = None, method: str | None = None, count: int | None = None,
                 retry_after: int = 1) -> int:
        """The next ``count`` matching requests are rejected as APF rejects them on 1.20 (a rule id)."""
        return self.fault("status", pattern=pattern, method=method, count=count, status=429,
                          body=APF_REJECTION_BODY, retry_after=retry_after)

    def add_node(self, name: str, **kw: Any) -> dict[str, Any]:
        """Seed ``objects.node(name, **kw)``."""
        return self.seed(objects.node(name, **kw))[0]

    def add_pod(self, name: str, node: str | None = None, *,
                owner: tuple[str, str] | dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        """Seed ``objects.pod``; ``owner=("ReplicaSet", "web")`` adds a controller ownerReference."""
        ref = objects.owner_ref(*owner) if isinstance(owner, tuple) else owner
        return self.seed(objects.pod(name, node, owner=ref, **kw))[0]

    def add_pdb(self, name: str, match_labels: dict[str, str], **kw: Any) -> dict[str, Any]:
        return self.seed(objects.pdb(name, match_labels, **kw))[0]

    def add_daemonset(self, name: str, **kw: Any) -> dict[str, Any]:
        return self.seed(objects.daemonset(name, **kw))[0]

    def tick(self) -> None:
        """Run the simulated kubelet/controllers once, now."""
        self.call("tick")

    def settings(self) -> dict[str, Any]:
        return self.call("options")

    def set_options(self, **changes: Any) -> dict[str, Any]:
        """Runtime settings: kubelet, grace_cap, start_delay, replicasets, tokens, watch_lag
        (``{"poddisruptionbudgets": 40}``: that resource's watches deliver each change 40 s late)."""
        return self.call("options", changes)

    def evictions(self, since: int = 0) -> list[tuple[str, str, int]]:
        """(namespace, pod, status) of every eviction POST, in arrival order."""
        out = []
        for e in self.requests(since=since):
            parts = e["path"].strip("/").split("/")
            if e["method"] == "POST" and len(parts) == 7 and parts[6] == "eviction":
                out.append((parts[3], parts[5], e["status"]))
        return out
