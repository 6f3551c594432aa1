"""At least once from the line that emits: SIGKILLed emitters, a restarted spool, replays deduped.

``SpoolLink.emit`` journals each event (fsync) under the state dir before it
returns and logs its id (``event.emitted``); a restarted process replays what
the spool never acknowledged, and the spool acknowledges a replay of what it
already holds without a second copy (its recent ids, read from the file at start).
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

import ujson
import zmq

from common import ipc
from common.config import load
from tests.spool.harness import Sender, SpoolProcess, file_events, spool_config
from tests.support.agent_rig import PROGRAMS, AgentRig
from tests.support.stack import Stack
from tests.support.wait import wait_for


def emitted(rig: AgentRig, program: str, type_: str = "") -> list[str]:
    """Event ids a program logged as emitted (every start of it: the log is appended to)."""
    out = []
    for line in rig.log(program).splitlines():
        try:
            rec = ujson.loads(line)
        except ValueError:
            continue
        if rec.get("msg") == "event.emitted" and (not type_ or rec.get("type") == type_):
            out.append(rec["event_id"])
    return out


def test_sigkilled_emitters_lose_no_event_they_emitted(tmp_path: Path) -> None:
    """The spool is stopped, so nothing is acknowledged; the watcher and the executor emit their steps of a
    drain and are SIGKILLed right after. Once the spool is back, every event they logged as emitted is in
    Vector: the restarted processes replayed their journals."""
    with Stack(str(tmp_path), vector=True) as s:
        rig = s.agent
        assert rig is not None
        assert rig.ctl("stop", "spool").returncode == 0
        s.publish_notice(deadline_in=60)
        wait_for(lambda: emitted(rig, "watcher", "notice.received") and emitted(rig, "executor", "drain.cordoned"),
                 30, "the watcher and the executor emitting their steps")
        victims = {p: rig.pid(p) for p in ("watcher", "executor")}
        before = {p: set(emitted(rig, p)) for p in victims}
        for pid in victims.values():
            os.kill(pid, signal.SIGKILL)
        journals = os.path.join(rig.state_dir, "outbox")
        assert {f"{p}.journal" for p in victims} <= set(os.listdir(journals))
        wait_for(lambda: all(rig.status()[p][0] == "RUNNING" and rig.pid(p) != pid for p, pid in victims.items()),
                 30, "the killed emitters restarted by supervisord")
        assert rig.ctl("start", "spool").returncode == 0

        def arrived() -> bool:
            got = {r.get("event_id") for r in s.vector.records()}
            return all(ids <= got for ids in before.values())

        wait_for(arrived, 60, "every event the killed processes emitted in Vector", interval=0.5)
        for p in victims:
            assert '"msg":"outbox.replayed"' in rig.log(p)
        # And from emission, for every program: what it logged as emitted reached Vector (or is still on its way).
        everything = {e for p in PROGRAMS for e in emitted(rig, p)}
        wait_for(lambda: everything <= {r.get("event_id") for r in s.vector.records()}, 60,
                 "every emitted event in Vector", interval=0.5)


def test_a_replay_of_what_the_spool_already_holds_is_acked_not_written_again(tmp_path: Path) -> None:
    """An emitter killed after the spool wrote its event but before the ack came replays it; so may one after a
    spool restart. Either way the ring keeps one copy."""
    cfg = spool_config(tmp_path)
    with SpoolProcess(cfg) as sp, Sender(cfg) as tx:
        tx.emit(5)
        tx.wait_all_acked()
        assert sp.stop() == 0
    events = {e["event_id"]: e for e in file_events(cfg)}
    with SpoolProcess(cfg):
        ctx = zmq.Context()
        try:
            sock = ipc.connect(ctx, zmq.DEALER, load(str(cfg)).paths.runtime_dir, ipc.SPOOL_INTAKE)
            for ev in events.values():                          # the replay: same events, same ids
                ipc.send(sock, ipc.T_EVENT, ev)
            acked: set[str] = set()

            def all_acked() -> bool:
                for frames in ipc.pending(sock):
                    acked.update(ipc.decode(frames)[1]["ids"])
                return acked >= set(events)

            wait_for(all_acked, 10, "the replay acknowledged")
        finally:
            ctx.destroy(linger=0)
    ids = [e["event_id"] for e in file_events(cfg) if e["type"] == "drain.evicted"]
    assert sorted(ids) == sorted(events)                        # one copy each
