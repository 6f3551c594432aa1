"""A receiver restarted after a flood of cancels still undoes a withdrawn notice's drain, though the
notice state names only the newest withdrawn ids (issue 26, point 3).

The real watcher (its notice book, its announcement on watcher.pub) and the real executor and
verifier shells on real ipc:// sockets: the executor was down while its notice was cancelled and
5,000 more notices with 256-character ids came and were cancelled; it starts from executor.json.
"""
from __future__ import annotations

import io
import time

import zmq

from common import ipc, wire
from common.config import build
from common.log import Logger
from common.notice import Notice
from executor import progress_file
from executor.__main__ import Executor
from executor.scheduler import Withdrawal
from tests.watcher.conftest import make_config
from verifier.__main__ import Verifier
from watcher.__main__ import Watcher

NODE = "node-a"


class WithdrawSpy:
    """A scheduler that only records what it was asked to withdraw."""

    def __init__(self) -> None:
        self.withdrawn: list[Withdrawal] = []

    def advance(self, order: object, now: float) -> None:
        pass

    def withdraw(self, w: Withdrawal, now: float) -> None:
        self.withdrawn.append(w)

    def reports(self) -> list[object]:
        return []


def test_a_drain_whose_cancel_left_the_recent_set_is_undone_by_a_restarted_executor(tmp_path):
    run, state = tmp_path / "run", tmp_path / "state"
    run.mkdir(mode=0o700)
    ctx: ipc.Context = zmq.Context()
    try:
        w = Watcher(make_config(node=NODE, paths={"runtime_dir": str(run), "state_dir": str(state)},
                                contract={"trust_dir": str(tmp_path / "trust"),
                                          "launch_path": str(tmp_path / "none.json")}),
                    Logger("watcher", stream=io.StringIO()), ctx)
        w.spool.emit = lambda *a, **k: {}
        now = time.time()
        old = Notice("old", "maintenance", NODE, "i-1", now, now + 900, "sco", received_at=now)
        w.observe(old, now)
        # The executor had drained it (cordoned) when it went down.
        rec = wire.DrainRecord.start(old, w.contracts.contract)
        rec.steps[wire.Step.CORDONED] = now
        progress_file.save(str(state / "executor.json"), {"old": rec}, Logger("t", stream=io.StringIO()))
        w.observe(Notice("old", "cancel", NODE, "", now, now, "sco"), now)
        for i in range(5000):   # into the book directly: saving notice.json 10,000 times is not the point
            nid = (f"f{i}-" + "x" * 256)[:256]
            w.book.observe(Notice(nid, "maintenance", NODE, "i-1", now, now + 900, "sco"), now)
            w.book.observe(Notice(nid, "cancel", NODE, "", now, now, "sco"), now)
        w.persist()
        assert "old" not in w.book.recent_withdrawn() and w.book.active == {}

        config = build({"node": {"name": NODE, "scheduler": "none"},
                        "paths": {"runtime_dir": str(run), "state_dir": str(state)},
                        "agent_socket": {"path": str(run / "agent.sock")}})
        ex = Executor(config, Logger("executor", stream=io.StringIO()), ctx)
        assert set(ex.drains.records) == {"old"}
        ex.drains.scheduler = spy = WithdrawSpy()
        v = Verifier(config, Logger("verifier", stream=io.StringIO()), ctx)
        v.state["clocks"]["old"] = {"notice_id": "old", "received_at": now}   # started before the restart
        end = time.monotonic() + 10
        while time.monotonic() < end and not ({ipc.T_NOTICE} <= v.heard and ex.drains.withdrawn):
            w.announce()
            time.sleep(0.05)
            ex.on_sub_readable()
            v.on_readable(v.notices_sub)
        assert ex.bad_messages == 0 and v.bad_messages == 0
        ex.drains.turn(time.time(), time.monotonic())
        assert [x.notice_id for x in spy.withdrawn] == ["old"] and spy.withdrawn[0].steps_done >= {"cordoned"}
        assert "old" in v.view().withdrawn    # its clock is dropped, no verdict owed
        ex.close()
    finally:
        ctx.destroy(linger=0)
