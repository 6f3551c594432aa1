"""Which pods on the node still count for the drain (pure, kubectl-drain style).

Each filter looks at one pod and returns a verdict or None; the first verdict
wins. The verifier uses the same filters to decide "node empty" from its own read, so the two
processes can never disagree about what had to move.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True, slots=True)
class PodVerdict:
    counts: bool     # must this pod be gone for the node to be empty?
    reason: str


def _finished(pod: dict[str, Any]) -> PodVerdict | None:
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return PodVerdict(False, "finished")
    return None


def _mirror(pod: dict[str, Any]) -> PodVerdict | None:
    if MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
        return PodVerdict(False, "mirror")
    return None


def _daemonset(pod: dict[str, Any]) -> PodVerdict | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "DaemonSet":
            return PodVerdict(False, "daemonset")
    return None


FILTERS: tuple[Callable[[dict[str, Any]], PodVerdict | None], ...] = (_finished, _mirror, _daemonset)


def pod_verdict(pod: dict[str, Any]) -> PodVerdict:
    for f in FILTERS:
        v = f(pod)
        if v is not None:
            return v
    return PodVerdict(True, "workload")


def pods_that_count(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if pod_verdict(p).counts]


def pod_key(pod: dict[str, Any]) -> str:
    md = pod.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"
