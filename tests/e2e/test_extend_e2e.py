"""``extend`` with the whole agent (real supervisord, the emulated API server): a workload that
asks for more time keeps its own pod on the node until the granted checkpoint_by -- past the
notice's checkpoint_by -- while another pod is evicted meanwhile (DESIGN section 6).

The workload is placed in its pod the way the kubelet does it: its process is moved into a
cgroup named after the pod's UID (cgroup v1 ``pids`` controller, ``/kubepods/pod<uid>``), so the
executor's ``/proc/PID/cgroup`` read (executor/workload_map.py) finds it there."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import ujson

from common.timefmt import parse_rfc3339
from tests.support.agent_rig import REPO
from tests.support.stack import NODE, Stack
from tests.support.wait import wait_for

PIDS_ROOT = "/sys/fs/cgroup/pids"

# Registers, and on the notice asks for 15 s more; writes the grant, then holds the checkpoint
# (no ack) until the stop file appears.
WORKLOAD = r"""
import json, os, sys, time
from sco_checkpoint.client import extend, on_notice
out, stop = sys.argv[1], sys.argv[2]
def save(notice):
    granted = extend(15)
    with open(out, "w") as f:
        json.dump({"id": notice["id"], "granted": granted, "at": time.time()}, f)
    while not os.path.exists(stop):
        time.sleep(0.05)
on_notice(save, name="slow-saver")
time.sleep(3600)
"""


def _pod_cgroup(uid: str) -> str | None:
    """A cgroup for the pod as the kubelet's cgroupfs driver names it, or None where cgroups cannot be made."""
    path = os.path.join(PIDS_ROOT, "kubepods", f"pod{uid}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    return path


def test_an_extending_workload_holds_its_own_pod_and_another_pod_is_evicted_meanwhile(tmp_path):
    budget = {"budget_s": 60, "checkpoint_s": 8, "evict_s": 20, "margin_s": 5}
    with Stack(str(tmp_path), contract=budget) as s:
        slow = s.kube.add_pod("slow", NODE, owner=("ReplicaSet", "slow"))
        s.kube.add_pod("other", NODE, owner=("ReplicaSet", "other"))
        cgroup = _pod_cgroup(slow["uid"])
        if cgroup is None:
            pytest.skip("cannot make a pod cgroup here (needs a writable cgroup v1 pids hierarchy)")
        granted_file, stop = tmp_path / "granted.json", tmp_path / "stop"
        env = dict(os.environ, SCO_AGENT_SOCKET=s.agent.settings["agent_socket"]["path"], PYTHONPATH=REPO)
        host = subprocess.Popen([sys.executable, "-c", WORKLOAD, str(granted_file), str(stop)], env=env)
        try:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(host.pid))
            wait_for(lambda: os.path.exists(s.agent.settings["agent_socket"]["path"]), 10, "agent socket")
            time.sleep(1.0)   # the workload registers (its thread connects at once)
            doc = s.publish_notice(deadline_in=60)

            other = wait_for(lambda: [e for e in s.events_of("drain.evicted", doc["id"])
                                      if e["data"]["pod"] == "default/other"], 20, "the other pod evicted")
            ext = s.wait_event("drain.checkpoint_extended", doc["id"], timeout=20)
            assert ext["data"]["pod_uid"] == slow["uid"]
            assert ext["data"]["client"] == "slow-saver" and ext["data"]["asked_s"] == 15
            grant = wait_for(lambda: granted_file.exists() and ujson.loads(granted_file.read_text()), 10,
                             "the workload's grant")
            granted_by = parse_rfc3339(grant["granted"])
            assert grant["granted"] == ext["data"]["checkpoint_by"]
            # The notice's checkpoint_by is 8 s after receipt; the grant is 15 s after that.
            told = s.wait_event("drain.clients_told", doc["id"])
            assert granted_by - parse_rfc3339(told["ts"]) > 15

            evicted = wait_for(lambda: [e for e in s.events_of("drain.evicted", doc["id"])
                                        if e["data"]["pod"] == "default/slow"], 40, "the slow pod evicted")
            # Held until its grant (to the event's millisecond), not released at checkpoint_by;
            # the other pod went long before.
            assert parse_rfc3339(evicted[0]["ts"]) >= granted_by - 0.001
            assert parse_rfc3339(other[0]["ts"]) < granted_by - 10
        finally:
            stop.touch()
            host.terminate()
            host.wait(timeout=10)
            for d in (cgroup, os.path.dirname(cgroup)):   # empty once the workload is gone
                try:
                    os.rmdir(d)
                except OSError:
                    pass
