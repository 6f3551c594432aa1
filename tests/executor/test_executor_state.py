"""The executor saves a new drain's record before it announces the drain (drain.started)."""
from __future__ import annotations

import io
import os
import time

import ujson
import zmq

from common.config import build
from common.log import Logger
from common.notice import Notice
from executor.__main__ import Executor


def test_a_new_drain_is_on_disk_before_drain_started_is_sent(tmp_path):
    """Otherwise an executor SIGKILLed between the two starts the same drain again after its restart
    and announces drain.started twice (checked at whole-agent scale by tests/chaos)."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    config = build({"node": {"name": "node-a", "scheduler": "none"},
                    "paths": {"runtime_dir": str(run), "state_dir": str(tmp_path / "state")},
                    "agent_socket": {"path": str(run / "agent.sock")}})
    ctx = zmq.Context()
    try:
        ex = Executor(config, Logger("executor", stream=io.StringIO()), ctx)
        on_disk: list[tuple[str, bool]] = []

        def spy(type_: str, notice_id: str = "", data: dict | None = None, now: float | None = None) -> dict:
            saved = {}
            if os.path.exists(ex.state_path):
                with open(ex.state_path, "rb") as f:
                    saved = ujson.loads(f.read())
            on_disk.append((type_, notice_id in saved))
            return {}

        ex.spool.emit = spy
        ex.drains.contract_heard = True
        now = time.time()
        ex.drains.turn(now, now)
        ex.drains.active = {"n1": Notice("n1", "reclaim", "node-a", "i-1", now, now + 60, "sco", received_at=now)}
        ex.drains.turn(now, now)
        ex.close()
    finally:
        ctx.destroy(linger=0)
    assert on_disk[0] == ("drain.started", True)
