"""The cluster's moving parts, simulated: kubelet, disruption controller, ReplicaSets, scheduler.

A real API server alone never finishes a graceful deletion, never starts a pod and never fills
in PDB status (see the research notes); a drain against it cannot complete. This loop plays
those parts. Decisions are pure functions below; ``Controllers`` applies them to the store.

Per-object knobs (annotations, emulator-only):
- pod ``emulator.sco/terminate-after``: seconds this pod takes to terminate, overriding the
  grace cap; ``never`` keeps it Terminating forever.
- pod ``emulator.sco/hold-phase: "true"``: the kubelet leaves the phase alone (e.g. Pending).
- node condition Ready=False/Unknown: that node's kubelet is dead (pods neither start nor finish).
- PDB ``emulator.sco/frozen-status: "true"``: the disruption controller leaves its status alone.
- pod ``emulator.sco/volume-detach: "never"``: its claims' volumes are never detached from the
  node (a provider detach that hangs: the volume stays in ``volumesAttached`` after the pod).

Volumes (``_volumes``), as the kubelet and the attach/detach controller keep them: a pod's claims
(``persistentVolumeClaim``) are attached to its node and listed in ``node.status.volumesAttached``
(``{"name", "devicePath"}``) and, while a pod on the node mounts them, in ``volumesInUse`` (the
kubelet's list; the pod object goes only once its volumes are unmounted, so here with the pod);
a volume no pod mounts any more is detached ``Options.detach_delay`` seconds later (the provider's
detach) and leaves ``volumesAttached`` then. Names are ``kubernetes.io/csi/<driver>^<handle>``, as
the CSI attacher's unique volume names (the handle here: ``<namespace>.<claim>``).
"""
from __future__ import annotations

import copy
import threading
import zlib
from collections.abc import Callable
from typing import Any

from common.timefmt import format_rfc3339

from .errors import ApiError
from .options import Options
from .policy import compute_status, is_frozen
from .resources import NODES, PDBS, PODS
from .store import Store

TERMINATE_AFTER = "emulator.sco/terminate-after"
VOLUME_DETACH = "emulator.sco/volume-detach"
CSI_PREFIX = "kubernetes.io/csi/emulator.sco^"
HOLD_PHASE = "emulator.sco/hold-phase"
_TERMINAL = ("Succeeded", "Failed")


def _annotation(obj: dict[str, Any], key: str) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(key)


def kubelet_alive(node: dict[str, Any]) -> bool:
    """A node's kubelet works unless its Ready condition says otherwise."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True


def termination_delay(pod: dict[str, Any], grace_cap: float) -> float | None:
    """Seconds from the kubelet noticing a deletion to removing the pod; None = never."""
    override = _annotation(pod, TERMINATE_AFTER)
    if override == "never":
        return None
    if override is not None:
        try:
            return max(0.0, float(override))
        except ValueError:
            pass  # a malformed knob falls back to the normal rule
    return min(float(pod["metadata"].get("deletionGracePeriodSeconds") or 0), grace_cap)


def running_status(pod: dict[str, Any], node: dict[str, Any], now: float) -> dict[str, Any]:
    """The status a kubelet reports once every container started."""
    stamp = format_rfc3339(now, millis=False)
    addresses = (node.get("status") or {}).get("addresses") or []
    host_ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "10.0.0.1")
    h = zlib.crc32(pod["metadata"]["uid"].encode())
    pod_ip = f"10.244.{h % 250}.{(h >> 8) % 250 + 2}"
    conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                            "PodScheduled")]
    containers = [{"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "",
                   "containerID": f"emulator://{pod['metadata']['uid'][:8]}-{i}", "ready": True,
                   "started": True, "restartCount": 0, "state": {"running": {"startedAt": stamp}}}
                  for i, c in enumerate((pod.get("spec") or {}).get("containers") or [])]
    old = pod.get("status") or {}
    return {"phase": "Running", "conditions": conditions, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": stamp,
            "containerStatuses": containers, "qosClass": old.get("qosClass", "BestEffort")}


def claim_volumes(pod: dict[str, Any]) -> list[str]:
    """The unique names of the volumes ``pod``'s claims attach (``CSI_PREFIX`` + ns.claim)."""
    ns = pod["metadata"].get("namespace", "default")
    return [f"{CSI_PREFIX}{ns}.{v['persistentVolumeClaim'].get('claimName', '')}"
            for v in (pod.get("spec") or {}).get("volumes") or []
            if isinstance(v, dict) and isinstance(v.get("persistentVolumeClaim"), dict)]


def controller_owner(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), None)


def replacement_for(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod a ReplicaSet creates when one of its pods is gone; None for other pods."""
    owner = controller_owner(pod)
    if owner is None or owner.get("kind") != "ReplicaSet":
        return None
    meta = pod["metadata"]
    new_meta = {"generateName": meta.get("generateName") or owner.get("name", "pod") + "-",
                "namespace": meta["namespace"], "ownerReferences": copy.deepcopy(meta["ownerReferences"])}
    for key in ("labels", "annotations"):
        if meta.get(key):
            new_meta[key] = copy.deepcopy(meta[key])
    spec = copy.deepcopy(pod.get("spec") or {})
    spec.pop("nodeName", None)
    return {"metadata": new_meta, "spec": spec}


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def schedulable(node: dict[str, Any], pod: dict[str, Any]) -> bool:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    if spec.get("unschedulable"):
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return (kubelet_alive(node) and not node["metadata"].get("deletionTimestamp")
            and all(tolerates(tolerations, t) for t in taints))


def pick_node(pod: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> str | None:
    """Least-loaded schedulable node (ties by name), or None."""
    load: dict[str, int] = {}
    for p in pods:
        node_name = (p.get("spec") or {}).get("nodeName")
        if node_name and (p.get("status") or {}).get("phase") not in _TERMINAL:
            load[node_name] = load.get(node_name, 0) + 1
    candidates = [n["metadata"]["name"] for n in nodes if schedulable(n, pod)]
    return min(candidates, key=lambda n: (load.get(n, 0), n)) if candidates else None


class Controllers:
    """Runs the simulated controllers every ``tick`` seconds on a daemon thread."""

    def __init__(self, store: Store, options: Callable[[], Options], clock: Callable[[], float]) -> None:
        self._store = store
        self._options = options
        self._clock = clock
        self._since: dict[tuple[str, str], float] = {}  # (state, uid) -> first seen
        self._unused: dict[tuple[str, str], float] = {}  # (node, volume) -> since no pod mounts it
        self._stuck: set[str] = set()                     # volumes whose detach never completes
        self._last_rv = store.resource_version
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kube-emu-controllers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self._options().tick):
            self.run_once()

    def run_once(self) -> None:
        """One pass of every controller, atomically with respect to API requests."""
        options = self._options()
        now = self._clock()
        with self._store.cond:
            nodes, _ = self._store.snapshot(NODES)
            if options.kubelet:
                self._kubelet({n["metadata"]["name"]: n for n in nodes}, options, now)
            # Replacements are created in the same pass as the removal they answer, so the
            # disruption controller never sees a ReplicaSet one pod short.
            self._replicasets(options)
            if options.replicasets:
                self._schedule(nodes)
            self._disruption(now)
            self._volumes(nodes, options, now)

    def _replicasets(self, options: Options) -> None:
        events = self._store.events_after(self._last_rv)
        self._last_rv = self._store.resource_version
        if not options.replicasets or not events:
            return
        for ev in events:
            if ev.resource != PODS.name or ev.type != "DELETED":
                continue
            replacement = replacement_for(ev.obj)
            if replacement is None:
                continue
            try:
                self._store.create(PODS, replacement["metadata"]["namespace"], replacement)
            except ApiError:
                pass  # e.g. the namespace is gone: a real ReplicaSet would fail too
        self._last_rv = self._store.resource_version

    def _schedule(self, nodes: list[dict[str, Any]]) -> None:
        pods, _ = self._store.snapshot(PODS)
        for pod in pods:
            spec = pod.get("spec") or {}
            if spec.get("nodeName") or pod["metadata"].get("deletionTimestamp") \
                    or spec.get("schedulerName", "default-scheduler") != "default-scheduler":
                continue
            target = pick_node(pod, nodes, pods)
            if target is not None:
                bound = copy.deepcopy(pod)
                bound["spec"]["nodeName"] = target
                self._store.update(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], bound)
                pods, _ = self._store.snapshot(PODS)

    def _first_seen(self, state: str, uid: str, now: float) -> float:
        return self._since.setdefault((state, uid), now)

    def _kubelet(self, nodes: dict[str, dict[str, Any]], options: Options, now: float) -> None:
        pods, _ = self._store.snapshot(PODS)
        live = set()
        for pod in pods:
            meta = pod["metadata"]
            node = nodes.get((pod.get("spec") or {}).get("nodeName") or "")
            if node is None or not kubelet_alive(node):
                continue
            live.add(meta["uid"])
            if meta.get("deletionTimestamp"):
                delay = termination_delay(pod, options.grace_cap)
                if delay is not None and now >= self._first_seen("term", meta["uid"], now) + delay:
                    self._store.remove(PODS, meta["namespace"], meta["name"], meta["uid"])
            elif (pod.get("status") or {}).get("phase", "Pending") == "Pending" \
                    and _annotation(pod, HOLD_PHASE) != "true" \
                    and now >= self._first_seen("start", meta["uid"], now) + options.start_delay:
                self._store.update(PODS, meta["namespace"], meta["name"],
                                   {"metadata": {"name": meta["name"]},
                                    "status": running_status(pod, node, now)}, subresource="status")
        self._since = {k: v for k, v in self._since.items() if k[1] in live}

    def _volumes(self, nodes: list[dict[str, Any]], options: Options, now: float) -> None:
        pods, _ = self._store.snapshot(PODS)
        mounted: dict[str, set[str]] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in _TERMINAL:
                mounted.setdefault(node, set()).update(claim_volumes(pod))
                if _annotation(pod, VOLUME_DETACH) == "never":
                    self._stuck.update(claim_volumes(pod))
        for node in nodes:
            name = node["metadata"]["name"]
            status = node.get("status") or {}
            in_use = mounted.get(name, set())
            attached = {v["name"] for v in status.get("volumesAttached") or []} | in_use
            for vol in sorted(attached - in_use):
                since = self._unused.setdefault((name, vol), now)
                if vol not in self._stuck and now >= since + options.detach_delay:
                    attached.discard(vol)
                    del self._unused[(name, vol)]
            for vol in in_use:
                self._unused.pop((name, vol), None)
            want = {"volumesAttached": [{"name": v, "devicePath": ""} for v in sorted(attached)],
                    "volumesInUse": sorted(in_use)}
            if {k: status.get(k) or [] for k in want} != want:
                self._store.update(NODES, "", name, {"metadata": {"name": name}, "status": {**status, **want}},
                                   subresource="status")

    def _disruption(self, now: float) -> None:
        pdbs, _ = self._store.snapshot(PDBS)
        if not pdbs:
            return
        pods, _ = self._store.snapshot(PODS)
        for pdb in pdbs:
            if is_frozen(pdb):
                continue
            ns = pdb["metadata"]["namespace"]
            status = compute_status(pdb, [p for p in pods if p["metadata"]["namespace"] == ns], now)
            self._store.update(PDBS, ns, pdb["metadata"]["name"],
                               {"metadata": {"name": pdb["metadata"]["name"]}, "status": status},
                               subresource="status")
