"""A withdrawn notice undoes only what the agent did: its own cordon goes, an operator's stays.

The whole agent under supervisord against the Kubernetes API-server emulator
(tests/stack.py): the withdrawal comes once as a relay ``cancel`` and once as
an AWS maintenance event the provider canceled.
"""
from __future__ import annotations

from executor.kube.node_patch import A_CORDONED_BY_AGENT, A_NOTICE
from tests.procutil import wait_for
from tests.stack import NODE, Stack

TAINT = "sco.io/notice"


def own_taint(stack: Stack) -> bool:
    return any(t["key"] == TAINT for t in stack.node()["spec"].get("taints") or [])


def annotations(stack: Stack) -> dict[str, str]:
    return stack.node()["metadata"].get("annotations") or {}


def test_relay_cancel_removes_the_agents_own_cordon(tmp_path):
    with Stack(str(tmp_path)) as stack:
        # Core NATS keeps nothing for a subscriber not there yet: publish once the watcher is.
        stack.wait_event("relay.connected")
        doc = stack.publish_notice(deadline_in=120)
        wait_for(lambda: stack.cordoned() and own_taint(stack), 20, "cordoned and tainted by the agent")
        assert annotations(stack)[A_CORDONED_BY_AGENT] == "true"
        stack.publish_notice(kind="cancel", notice_id=doc["id"])
        wait_for(lambda: not stack.cordoned() and not own_taint(stack), 20, "the agent's cordon undone")
        assert A_NOTICE not in annotations(stack)
        stack.wait_event("notice.withdrawn", doc["id"])
        stack.wait_event("drain.uncordoned", doc["id"])


def test_canceled_maintenance_keeps_an_operators_cordon(tmp_path):
    with Stack(str(tmp_path), poll_interval_s=0.3) as stack:
        stack.kube.kubectl("cordon", NODE, check=True)
        event = stack.meta.aws_maintenance_add("system-reboot", in_s=600)
        wait_for(lambda: own_taint(stack), 20, "the agent's taint for the maintenance")
        assert A_CORDONED_BY_AGENT not in annotations(stack)     # the cordon was there before us
        received = stack.wait_event("notice.received")
        assert received["data"]["channel"] == "metadata" and received["data"]["detail"] == "system-reboot"
        stack.meta.aws_maintenance_state(event, "canceled")
        wait_for(lambda: not own_taint(stack), 20, "the agent's taint removed")
        stack.wait_event("drain.uncordoned", received["notice_id"])
        assert stack.cordoned(), "the operator's cordon must stay"
