"""The demo: the agent under supervisord drains a node, and the timeline is printed.

    python -m tests.demo        (deploy/demo.sh installs everything first)

It starts a real nats-server, the metadata, Kubernetes API-server and Vector
emulators, and supervisord with the four agent processes; seeds the node with
pods (one of them under a PodDisruptionBudget, one DaemonSet pod) and a
restart-safe workload connected to the agent socket; publishes a reclaim
notice on the relay; waits for the verdict; prints the timeline from the
spool and what reached Vector; then stops everything.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from tests.support.stack import NODE, OTHER_NODE, Stack
from tests.support.wait import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTICE_WINDOW_S = 45.0


def say(text: str) -> None:
    print(text, flush=True)


def seed(stack: Stack) -> None:
    kube = stack.kube
    for i in range(3):
        kube.add_pod(f"web-{i}", NODE, owner=("ReplicaSet", "web"), labels={"app": "web"})
    kube.add_pdb("web", {"app": "web"}, max_unavailable=1)
    kube.add_daemonset("node-exporter")
    kube.add_pod("node-exporter-a", NODE, owner=("DaemonSet", "node-exporter"))
    kube.add_pod("api-0", OTHER_NODE, owner=("ReplicaSet", "api"))


def timeline(stack: Stack, notice_id: str) -> list[str]:
    events = [e for e in stack.events() if e["notice_id"] == notice_id]
    if not events:
        return []
    start = events[0]["ts"]
    from common.timefmt import parse_rfc3339

    t0 = parse_rfc3339(start)
    lines = []
    for e in events:
        offset = (parse_rfc3339(e["ts"]) - t0) * 1000
        detail = {k: v for k, v in e["data"].items() if k in ("channel", "clients", "pod", "status", "client",
                                                                "outcome", "held_up_by", "left", "taint_key")}
        lines.append(f"  +{offset:7.0f} ms  {e['type']:<26} {detail if detail else ''}")
    return lines


def main() -> int:
    base = tempfile.mkdtemp(prefix="sco-demo-")
    say(f"== sco-agent demo (work directory {base})")
    with Stack(base, vector=True) as stack:
        say("== supervisord is running the agent:")
        say(stack.agent.ctl("status").stdout.rstrip())
        seed(stack)
        say(f"== node {NODE}: {sorted(stack.kube.pod_names(NODE))}")
        worker_state = os.path.join(base, "worker-progress.json")
        env = dict(os.environ, SCO_AGENT_SOCKET=stack.agent.settings["agent_socket"]["path"],
                   PYTHONPATH=REPO)
        worker = subprocess.Popen([sys.executable, os.path.join(REPO, "examples", "restart_safe_worker.py"),
                                   "--state", worker_state, "--log-every", "100000"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(1.0)   # let the worker register on the agent socket
            doc = stack.publish_notice(deadline_in=NOTICE_WINDOW_S)
            say(f"== reclaim notice {doc['id']} published on the relay, deadline in {NOTICE_WINDOW_S:.0f} s")
            verdict = wait_for(lambda: (stack.events_of("drain.done", doc["id"])
                                        or stack.events_of("drain.overrun", doc["id"])), NOTICE_WINDOW_S + 10,
                               "a verdict")[0]
            time.sleep(1.0)
            say("== timeline (from the spool):")
            for line in timeline(stack, doc["id"]):
                say(line)
            say(f"== verdict: {verdict['type']}  {verdict['data'].get('timeline_ms', {})}")
            node = stack.node()
            say(f"== node {NODE}: unschedulable={node['spec'].get('unschedulable')} "
                f"taints={[t['key'] for t in node['spec'].get('taints') or []]}")
            say(f"== pods left on {NODE}: {sorted(stack.kube.pod_names(NODE))}")
            say(f"== pods on {OTHER_NODE} (untouched): {sorted(stack.kube.pod_names(OTHER_NODE))}")
            if stack.vector is not None:
                wait_for(lambda: len(stack.vector.records()) >= len(stack.events()), 15, "events shipped to Vector")
                say(f"== Vector received {len(stack.vector.records())} events "
                    f"(duplicates: {len(stack.vector.stats().get('duplicates') or {})})")
        finally:
            worker.terminate()
            out, _ = worker.communicate(timeout=10)
            say("== the workload said:")
            for line in out.splitlines()[-3:]:
                say(f"  {line}")
        say("== stopping supervisord (and with it every agent process)")
    say("== done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
