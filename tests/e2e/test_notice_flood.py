"""A flood of cancelled notices at the agent's limits, then a real reclaim: drained on time.

Issue 26: 3,000 notice/cancel pairs with 93-character ids grew the watcher's notice message past
what the executor's socket accepts; libzmq dropped the executor's connection and never made it
again, and a reclaim 4 s later got ``notice.received`` and nothing else. Here 5,000 pairs with
256-character ids (the longest the watcher accepts) go through the relay, with the whole agent
under supervisord; every notice message the watcher announces is read off watcher.pub meanwhile.
"""
from __future__ import annotations

import json
import os
import time

import zmq

from common import ipc
from tests.support.stack import HALL, NODE, Stack
from tests.support.wait import wait_for

PAIRS = 5000
CHUNK = 250   # published at once, then the watcher is given time to take them (NATS core drops past
              # a subscriber's pending limit: watcher/relay.py PENDING_MSGS)


def long_id(i: int) -> str:
    return (f"flood-{i:05d}-" + "x" * 256)[:256]


def test_a_flood_of_cancelled_notices_then_a_reclaim_is_drained_on_time(tmp_path):
    with Stack(str(tmp_path)) as s:
        ctx: ipc.Context = zmq.Context()
        tap = ipc.subscriber(ctx, s.agent.run_dir, ipc.WATCHER_PUB, ipc.T_NOTICE)
        largest = 0
        counters: dict[str, int] = {}

        def read_tap() -> dict[str, int]:
            nonlocal largest, counters
            for frames in ipc.pending(tap):
                largest = max(largest, len(frames[1]))
                counters = ipc.decode(frames)[1].get("counters", {})
            return counters

        try:
            subject = f"sco.notice.{HALL}.{NODE}"
            for start in range(0, PAIRS, CHUNK):
                for i in range(start, start + CHUNK):
                    doc = s.notice_payload(kind="maintenance", deadline_in=3600, notice_id=long_id(i))
                    s.nats.publish(subject, json.dumps(doc).encode())
                    s.nats.publish(subject, json.dumps({**doc, "kind": "cancel"}).encode())
                wait_for(lambda end=start + CHUNK: read_tap().get("withdrawn.relay", 0) >= end, 120,
                         f"the watcher to withdraw {start + CHUNK} notices")
            assert counters.get("withdrawn.relay") == PAIRS and counters.get("new.relay") == PAIRS
            assert not [k for k in counters if "slow_consumer" in k or k.startswith("ignored.reason.too")]

            # The pods come after the flood: no maintenance drain of it can have moved them.
            s.kube.add_pod("app-1", NODE, owner=("ReplicaSet", "app"))
            s.kube.add_pod("app-2", NODE, owner=("ReplicaSet", "app"))
            reclaim = s.publish_notice(kind="reclaim", deadline_in=40)
            sent = time.time()
            rid = reclaim["id"]
            s.wait_event("drain.cordoned", rid, timeout=30)
            assert s.cordoned()
            evicted = wait_for(lambda: len(s.events_of("drain.evicted", rid)) >= 2 and s.events_of("drain.evicted", rid),
                               30, "both pods evicted")
            assert sorted(e["data"]["pod"] for e in evicted) == ["default/app-1", "default/app-2"]
            done = s.wait_event("drain.done", rid, timeout=45)
            assert done["data"]["outcome"] == "done"
            assert time.time() - sent < 40   # before the deadline
            read_tap()
        finally:
            tap.close(linger=0)
            ctx.destroy(linger=0)
        assert 0 < largest <= ipc.MAX_MESSAGE
        print(f"largest notice message during the flood: {largest} bytes")
        # No process refused a send, and no receiving socket was dropped by its peer meanwhile.
        for program in ("watcher", "executor", "verifier"):
            log = s.agent.log(program)
            assert "send_too_large" not in log and "peer_disconnected" not in log, program
        assert os.path.exists(s.spool_path)
