"""The watcher persists a change to the notices before it sends the event that reports it."""
from __future__ import annotations

import io
import time

import ujson
import zmq

from common.log import Logger
from common.notice import Notice
from tests.watcher.conftest import make_config
from watcher.__main__ import Watcher


def test_a_new_notice_and_its_withdrawal_are_on_disk_before_their_events_are_sent(tmp_path):
    """Otherwise a watcher SIGKILLed between the two re-learns the notice from the metadata poll and
    reports notice.received a second time (checked at whole-agent scale by tests/chaos)."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    config = make_config(node="node-a", paths={"runtime_dir": str(run), "state_dir": str(tmp_path / "state")})
    ctx = zmq.Context()
    try:
        w = Watcher(config, Logger("watcher", stream=io.StringIO()), ctx)
        on_disk: list[tuple[str, list[str], list[str]]] = []

        def spy(type_: str, notice_id: str = "", data: dict | None = None, now: float | None = None) -> dict:
            with open(w.state_path, "rb") as f:
                snap = ujson.loads(f.read())
            on_disk.append((type_, [n["id"] for n in snap["active"]], list(snap["withdrawn"])))
            return {}

        w.spool.emit = spy
        now = time.time()
        w.observe(Notice("n1", "reclaim", "node-a", "i-1", now, now + 60, "sco", channel="relay"), now)
        w.withdraw("n1", "metadata", now + 1)
    finally:
        ctx.destroy(linger=0)
    assert on_disk == [("notice.received", ["n1"], []), ("notice.withdrawn", [], ["n1"])]
