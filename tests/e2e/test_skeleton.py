"""The walking skeleton end to end: real supervisord, real nats-server, emulated metadata and API server."""
from __future__ import annotations

import os
import signal

import zmq

from executor.kube.node_patch import A_DEADLINE, A_NOTICE
from tests.support.procutil import pid_alive
from tests.support.stack import OTHER_NODE
from tests.support.wait import wait_for
from tests.watcher.rig import NoticeSub


def own_taint(node: dict) -> dict | None:
    return next((t for t in node["spec"].get("taints") or [] if t["key"] == "sco.io/notice"), None)


def test_relay_notice_cordons_and_taints_and_spools_events(stack):
    """(a) A reclaim on the relay: node cordoned and tainted, every step in the spool file."""
    doc = stack.publish_notice(deadline_in=120)
    wait_for(stack.cordoned, 20, "node cordoned")
    # The taint is its own PATCH under another identity (NodeRestriction refuses a node's own taint
    # changes), so it may land a moment after the cordon: wait for it rather than read it at once.
    wait_for(lambda: own_taint(stack.node()) is not None, 20, "node tainted")
    node = stack.node()
    assert own_taint(node) == {"key": "sco.io/notice", "value": "reclaim", "effect": "NoSchedule"}
    assert node["metadata"]["annotations"][A_NOTICE] == doc["id"]
    assert node["metadata"]["annotations"][A_DEADLINE] == doc["deadline"]
    for t in ("notice.received", "drain.started", "drain.cordoned", "verifier.clock_started"):
        stack.wait_event(t, doc["id"])
    assert stack.events_of("notice.received", doc["id"])[0]["data"]["channel"] == "relay"
    assert not stack.cordoned(OTHER_NODE)


def test_imds_only_notice_cordons(stack):
    """(b) The same drain from AWS IMDSv2 alone (the relay says nothing)."""
    stack.meta.aws_spot("terminate", in_s=120)
    wait_for(stack.cordoned, 20, "node cordoned from the IMDS notice")
    ev = stack.wait_event("notice.received")
    assert ev["data"]["channel"] == "metadata" and ev["data"]["source"] == "aws"
    assert ev["data"]["detail"] == "terminate"
    # IMDSv2: every metadata GET carried a token obtained with PUT.
    reqs = stack.meta.requests("/latest/")
    assert any(r["method"] == "PUT" for r in reqs)


def test_sigkill_of_each_process_leaves_the_others_and_is_restarted(stack):
    """(c) SIGKILL any one process: the other three keep their PIDs, supervisord restarts it."""
    for program in ("spool", "watcher", "executor", "verifier"):
        before = {p: pid for p, (_, pid) in stack.agent.status().items()}
        os.kill(before[program], signal.SIGKILL)

        def restarted(program: str = program, old: int = before[program]) -> bool:
            state, pid = stack.agent.status()[program]
            return state == "RUNNING" and pid != old

        wait_for(restarted, 30, f"{program} restarted")
        after = {p: pid for p, (_, pid) in stack.agent.status().items()}
        for other, pid in before.items():
            if other != program:
                assert after[other] == pid, f"{other} changed PID when {program} was killed"
                assert pid_alive(pid)
    # supervisord (its process-events plugin) recorded each unexpected exit in the spool.
    def exits() -> set[str]:
        return {e["data"].get("program") for e in stack.events_of("agent.process_exited")
                if e["data"].get("expected") is False}

    wait_for(lambda: exits() >= {"spool", "watcher", "executor", "verifier"}, 30, "agent.process_exited events")


def test_notice_while_executor_is_stopped_is_acted_on_when_it_starts(stack):
    """(d) The notice is state: published while the executor is stopped, acted on at its start."""
    assert "stopped" in stack.agent.ctl("stop", "executor").stdout
    doc = stack.publish_notice(deadline_in=120)
    stack.wait_event("notice.received", doc["id"])
    # Several re-announcements with nobody to hear them (counted on the watcher's PUB, not slept for).
    ctx = zmq.Context()
    sub = NoticeSub(ctx, stack.agent.run_dir).start()
    try:
        wait_for(lambda: sum(1 for _, state in sub.states
                             if any(n.get("id") == doc["id"] for n in state.get("active") or [])) >= 3,
                 15, "three announcements of the notice")
    finally:
        sub.stop()
        ctx.destroy(linger=0)
    assert not stack.cordoned()
    assert "started" in stack.agent.ctl("start", "executor").stdout
    wait_for(stack.cordoned, 20, "node cordoned after the executor came back")
    stack.wait_event("drain.cordoned", doc["id"])


def test_malformed_notices_are_counted_and_the_watcher_keeps_running(stack):
    """(e) Bad JSON, wrong types, 1 MB, another node's name: rejected or ignored, counted, no crash."""
    watcher_pid = stack.agent.pid("watcher")
    stack.publish_raw(b"{not json")
    bad_types = stack.notice_payload()
    bad_types["deadline"] = 12345
    import ujson

    stack.publish_raw(ujson.dumps(bad_types).encode())
    stack.publish_raw(b"x" * 1_000_000)
    stack.publish_notice(node=OTHER_NODE)   # on the other node's subject: we never hear it
    other = stack.notice_payload(node=OTHER_NODE)
    stack.publish_raw(ujson.dumps(other).encode())   # on our subject, naming another node
    reasons = wait_for(lambda: (r := sorted(e["data"]["reason"] for e in stack.events_of("notice.rejected")))
                       and len(r) >= 3 and r, 20, "three rejections")
    assert reasons == ["bad_field", "bad_json", "too_large"]
    ignored = wait_for(lambda: stack.events_of("notice.ignored"), 20, "the other node's notice ignored")
    assert all(e["data"]["reason"] == "other_node" for e in ignored)
    assert other["id"] in {e["notice_id"] for e in ignored}
    assert stack.agent.pid("watcher") == watcher_pid
    assert not stack.cordoned() and not stack.cordoned(OTHER_NODE)
    # ... and a good notice afterwards still drains.
    stack.publish_notice()
    wait_for(stack.cordoned, 20, "node cordoned after the garbage")
