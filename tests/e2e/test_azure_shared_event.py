"""Azure: an event shared with other VMs is never acknowledged; our own still is (issue 26, point 6).

The whole agent under a real supervisord, the metadata emulator serving Azure Scheduled Events
(tests/emulators/metadata/azure.py: one VM's acknowledgement starts the event for every VM in its
Resources, as Microsoft documents) and the Kubernetes emulator. The node holds no pod, so each
drain is done within a second or two of the notice; what the test watches is what follows.
"""
from __future__ import annotations

import dataclasses
import time

from common.contract import BUILTIN
from tests.support.stack import Stack
from tests.support.wait import wait_for

VM = "vm-emu-0"   # the emulator's VM name (/metadata/instance/compute/name)


def test_a_shared_event_is_withheld_and_said_and_our_own_is_acknowledged_after_the_drain(tmp_path):
    # A Reboot is a maintenance notice: drained at once here (the built-in start waits until
    # deadline - budget_s), so its acknowledgement -- and the refusal to send one -- comes now.
    with Stack(str(tmp_path), provider="azure", poll_interval_s=0.3, contract=dataclasses.asdict(BUILTIN.drain),
               contract_extra={"start": {"maintenance": "at_once"}}) as s:
        shared = s.meta.azure_add("Reboot", in_s=900, resources=[VM, "vm-other", "vm-third"])
        withheld = s.wait_event("notice.ack_withheld", f"azure-{shared}", timeout=30)
        assert withheld["data"]["reason"] == "shared_event"
        assert withheld["data"]["others"] == ["vm-other", "vm-third"]
        assert s.wait_event("drain.done", f"azure-{shared}")       # our drain was done meanwhile
        time.sleep(2.0)   # several more polls and progress messages: still nothing acknowledged
        assert s.meta.azure_acks()["acks"] == [] and s.meta.azure_released() == {}
        assert len(s.events_of("notice.ack_withheld", f"azure-{shared}")) == 1

        own = s.meta.azure_add("Preempt", in_s=60, resources=[VM])
        wait_for(lambda: s.meta.azure_acks()["acks"], 30, "our own event acknowledged")
        assert [a["event_ids"] for a in s.meta.azure_acks()["acks"]] == [[own]]
        assert s.wait_event("drain.done", f"azure-{own}")
        assert s.meta.azure_released() == {VM: [own]}             # nobody else released
        assert "unknown_resources" not in s.agent.log("watcher")
