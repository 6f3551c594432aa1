"""The executor loop's side of the Kubernetes drain (executor/kube_driver.py), with a fake API."""
from __future__ import annotations

import copy
from typing import Any

from common.config import build
from executor.kube_driver import KubeDriver
from executor.node_patch import A_CORDONED_BY_AGENT, A_NOTICE
from tests.procutil import wait_for

TAINT = {"key": "sco.io/notice", "value": "reclaim", "effect": "NoSchedule"}


class FakeApi:
    """Just enough of KubeApi for the node steps: one Node, patches recorded and applied."""

    node = "node-a"

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {"metadata": {"name": self.node, "resourceVersion": "1",
                                                 "annotations": {A_NOTICE: "n1", A_CORDONED_BY_AGENT: "true"}},
                                    "spec": {"unschedulable": True, "taints": [TAINT]}}
        self.patches: list[dict[str, Any]] = []

    def get_node(self) -> dict[str, Any]:
        return copy.deepcopy(self.doc)

    def patch_node(self, name: str, patch: dict[str, Any], content_type: str = "") -> dict[str, Any]:
        self.patches.append(patch)
        for key, value in (patch["metadata"].get("annotations") or {}).items():
            if value is None:
                self.doc["metadata"]["annotations"].pop(key, None)
        self.doc["spec"].update(patch["spec"])
        return self.get_node()

    def close(self) -> None:
        pass


def test_a_withdrawal_that_succeeded_is_not_run_again_before_the_loop_reads_its_reports():
    """Found by the chaos run: the loop saw the withdrawal thread gone before it had applied its
    reports (state still "done"), started a second one, and drain.uncordoned was announced twice."""
    api = FakeApi()
    driver = KubeDriver(build({"kubernetes": {"api_url": "http://127.0.0.1:1"}}), lambda: api)
    rec = {"taint_key": "sco.io/notice"}
    try:
        driver.withdraw("n1", rec)
        wait_for(lambda: not driver.withdrawals["n1"].alive, 5, "the withdrawal done")
        driver.withdraw("n1", rec)   # the loop's next turn, its reports not read yet
        wait_for(lambda: not driver.withdrawals["n1"].alive, 5, "no second withdrawal running")
        steps = [r.name for r in driver.reports() if r.kind == "step"]
    finally:
        driver.close()
    assert steps == ["uncordoned"]
    assert len(api.patches) == 1 and api.doc["spec"] == {"unschedulable": False, "taints": []}


def test_a_withdrawal_that_failed_is_started_again():
    """A withdrawal stopped before it could uncordon (the executor stopping it) is retried next turn."""
    api = FakeApi()
    driver = KubeDriver(build({"kubernetes": {"api_url": "http://127.0.0.1:1"}}), lambda: api)
    rec = {"taint_key": "sco.io/notice"}
    try:
        driver.withdraw("n1", rec)
        first = driver.withdrawals["n1"]
        wait_for(lambda: not first.alive, 5, "the withdrawal done")
        first.succeeded = False      # as if it had ended without reaching the server
        driver.withdraw("n1", rec)
        assert driver.withdrawals["n1"] is not first
        wait_for(lambda: not driver.withdrawals["n1"].alive, 5, "the second withdrawal done")
    finally:
        driver.close()
