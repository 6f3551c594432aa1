"""Chaos drains on a Kubernetes node: the API-server emulator's node-a, with node-b next to it.

Each drain puts fresh pods (new names, so new UIDs) on node-a, with the plan's
grace period (the emulator's kubelet honours up to ``GRACE_CAP_S``); node-b
holds pods that must never be touched. After the verdict the node must be
cordoned and empty (done), no pod evicted twice, no write aimed at node-b or
its pods; then the notice is withdrawn, which must uncordon node-a, and what is
left is deleted so the next drain starts clean.
"""
from __future__ import annotations

from typing import Any

from tests.chaos import invariants
from tests.chaos.invariants import Observed
from tests.chaos.plan import DrainPlan
from tests.chaos.runner import SPOOL_POLL_S, ChaosRun
from tests.support.stack import NODE, OTHER_NODE
from tests.support.wait import wait_for

GRACE_CAP_S = 5.0
OTHER_PODS = ("bystander-0", "bystander-1")
TAINT_KEY = "sco.io/notice"
SMP = "application/strategic-merge-patch+json"
UNDO_WITHIN_S = 20.0


def own_taint(node: dict[str, Any]) -> bool:
    return any(t.get("key") == TAINT_KEY for t in node.get("spec", {}).get("taints") or [])


class KubeChaos(ChaosRun):
    scheduler = "kubernetes"

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.own_pods: set[str] = set()   # namespace/name of every pod ever placed on node-a
        self.pods: list[str] = []
        self.log_since = 0

    @property
    def node(self) -> str:
        return NODE

    def prepare_run(self) -> None:
        kube = self.stack.kube
        kube.set_options(grace_cap=GRACE_CAP_S)
        for name in OTHER_PODS:
            kube.add_pod(name, OTHER_NODE)

    def prepare(self, plan: DrainPlan) -> None:
        kube = self.stack.kube
        self.pods = [f"d{plan.index}-{j}" for j in range(plan.pods)]
        for j, name in enumerate(self.pods):
            # No owner: the emulator's ReplicaSet controller would replace an evicted pod, and the
            # replacement would land on node-a as soon as the withdrawal uncordons it.
            kube.add_pod(name, NODE, **self.pod_options(plan, j))
        self.own_pods |= {f"default/{name}" for name in self.pods}
        self.log_since = kube.last_request_seq()

    def pod_options(self, plan: DrainPlan, j: int) -> dict[str, Any]:
        """The emulator's knobs for the plan's j-th pod (tests.emulators.kube.objects.pod)."""
        return {"grace": plan.grace_s}

    def _left(self) -> tuple[str, ...]:
        return tuple(sorted(self.stack.kube.pod_names(NODE)))

    def observe(self, plan: DrainPlan, notice_id: str, verdicts: tuple[dict[str, Any], ...]) -> Observed:
        kube = self.stack.kube
        left = self._left()
        if left and len(verdicts) == 1 and verdicts[0]["type"] == "drain.done":
            # The executor said empty, so only a pod it did not see (a bug) can still be listed.
            try:
                wait_for(lambda: not self._left(), 3, "pods gone")
                left = ()
            except TimeoutError:
                left = self._left()
        log = kube.requests(since=self.log_since)
        extra = invariants.duplicate_evictions(log) + invariants.foreign_writes(log, NODE, self.own_pods)
        bystanders = {p["metadata"]["name"] for p in kube.pods(OTHER_NODE) if not p["metadata"].get("deletionTimestamp")}
        if bystanders != set(OTHER_PODS):
            extra.append(f"{notice_id}: the pods of {OTHER_NODE} are now {sorted(bystanders)}")
        return Observed(notice_id, verdicts, plan.overrun_allowed(), bool(kube.node(NODE)["spec"].get("unschedulable")),
                        left, tuple(extra))

    def reset(self, plan: DrainPlan, notice_id: str) -> list[str]:
        kube, out = self.stack.kube, []
        self.withdraw(notice_id)
        try:
            wait_for(lambda: any(e["type"] == "drain.uncordoned" and e["notice_id"] == notice_id
                                 for e in self.events()), UNDO_WITHIN_S, "drain.uncordoned", interval=SPOOL_POLL_S)
        except TimeoutError:
            out.append(f"{notice_id}: withdrawn, but no drain.uncordoned within {UNDO_WITHIN_S:g} s")
        self.stack.meta.sco_clear()
        node = kube.node(NODE)
        if node["spec"].get("unschedulable") or own_taint(node):
            out.append(f"{notice_id}: withdrawn, but the node is still cordoned or tainted: {node['spec']}")
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != TAINT_KEY]
            kube.request("PATCH", f"/api/v1/nodes/{NODE}", {"spec": {"unschedulable": False, "taints": taints}}, SMP)
        for name in self._left():
            kube.request("DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")
        wait_for(lambda: not self._left(), 20, "node-a empty for the next drain")
        return out
