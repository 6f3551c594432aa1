"""Workloads on the agent socket, with the whole agent: 50 clients hear the notice and answer;
the executor SIGKILLed mid-notice comes back and the clients get the still-active notice again."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import ujson

from tests.support.agent_rig import REPO
from tests.support.stack import NODE
from tests.support.wait import wait_for

CLIENTS = 50

# One process hosts all 50 clients (threads): each registers, records the notices it is called
# with (one line per call), and answers "checkpointed".
CLIENT_HOST = r"""
import sys, threading, time, json
from sco_checkpoint.client import on_notice
out = open(sys.argv[1], "a", buffering=1)
lock = threading.Lock()
def make(i):
    def callback(notice):
        with lock:
            out.write(json.dumps({"client": i, "id": notice["id"]}) + "\n")
    return callback
for i in range(int(sys.argv[2])):
    on_notice(make(i), name=f"client-{i}")
time.sleep(3600)
"""


def test_fifty_clients_hear_the_notice_ack_and_hear_it_again_after_an_executor_restart(tmp_path):
    from tests.support.stack import Stack

    with Stack(str(tmp_path), contract={"budget_s": 60, "checkpoint_s": 20, "evict_s": 20, "margin_s": 5}) as s:
        s.kube.add_pod("web-0", NODE, owner=("ReplicaSet", "web"), terminate_after="never")
        calls = tmp_path / "calls.jsonl"
        env = dict(os.environ, SCO_AGENT_SOCKET=s.agent.settings["agent_socket"]["path"], PYTHONPATH=REPO)
        host = subprocess.Popen([sys.executable, "-c", CLIENT_HOST, str(calls), str(CLIENTS)], env=env)
        try:
            wait_for(lambda: os.path.exists(s.agent.settings["agent_socket"]["path"]), 10, "agent socket")
            doc = s.publish_notice(deadline_in=60)

            def called() -> list[dict]:
                if not calls.exists():
                    return []
                return [ujson.loads(line) for line in calls.read_text().splitlines() if line.strip()]

            wait_for(lambda: len({c["client"] for c in called() if c["id"] == doc["id"]}) == CLIENTS, 30,
                     "all 50 clients called back")
            acks = wait_for(lambda: len(a := s.events_of("drain.checkpoint_acked", doc["id"])) >= CLIENTS and a,
                            30, "50 acks in the spool")
            assert {a["data"]["client"] for a in acks} == {f"client-{i}" for i in range(CLIENTS)}
            assert all(a["data"]["status"] == "checkpointed" for a in acks)
            assert all(isinstance(a["data"]["latency_ms"], int) for a in acks)

            # The executor dies mid-notice; supervisord restarts it; every client is sent the
            # still-active notice again and answers with a replay (its callback is not re-run).
            old = s.agent.pid("executor")
            os.kill(old, signal.SIGKILL)
            wait_for(lambda: s.agent.status()["executor"][0] == "RUNNING" and s.agent.pid("executor") != old,
                     30, "executor restarted")
            replays = wait_for(lambda: len(r := [a for a in s.events_of("drain.checkpoint_acked", doc["id"])
                                                 if a["data"].get("replay")]) >= CLIENTS and r,
                               40, "50 replayed acks after the restart")
            assert {a["data"]["client"] for a in replays} == {f"client-{i}" for i in range(CLIENTS)}
            assert len(called()) == CLIENTS   # no callback ran twice
        finally:
            host.terminate()
            host.wait(timeout=10)
