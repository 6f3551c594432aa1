"""The watcher persists a change to the notices before it sends the event that reports it."""
from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import ujson
import zmq

from common import journal
from common.log import Logger
from common.notice import Notice
from tests.watcher.conftest import make_config
from watcher.__main__ import Watcher


@pytest.fixture
def setting(tmp_path):
    """A watcher's config on ``tmp_path`` (runtime and state dirs) and a zmq context."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    ctx = zmq.Context()
    yield make_config(node="node-a", paths={"runtime_dir": str(run), "state_dir": str(tmp_path / "state")}), ctx
    ctx.destroy(linger=0)


def test_a_new_notice_and_its_withdrawal_are_on_disk_before_their_events_are_sent(setting):
    """Otherwise a watcher SIGKILLed between the two re-learns the notice from the metadata poll and
    reports notice.received a second time (checked at whole-agent scale by tests/chaos)."""
    config, ctx = setting
    w = Watcher(config, Logger("watcher", stream=io.StringIO()), ctx)
    on_disk: list[tuple[str, list[str], list[str]]] = []

    def spy(type_: str, notice_id: str = "", data: dict | None = None, now: float | None = None) -> dict:
        with open(w.state_path, "rb") as f:
            snap = ujson.loads(f.read())
        on_disk.append((type_, [n["id"] for n in snap["active"]], list(snap["withdrawn"])))
        return {}

    w.spool.commit = lambda ev: spy(ev["type"])
    now = time.time()
    w.observe(Notice("n1", "reclaim", "node-a", "i-1", now, now + 60, "sco", channel="relay"), now)
    w.withdraw("n1", "metadata", now + 1)
    assert on_disk == [("notice.received", ["n1"], []), ("notice.withdrawn", [], ["n1"])]


class Killed(BaseException):
    """The watcher dying at this line (SIGKILL): nothing after it runs."""


def test_a_watcher_killed_after_saving_a_notice_sends_its_received_event_at_the_next_start(tmp_path, setting):
    """The notice is on disk (and announced) before its notice.received is journalled; a watcher killed
    in between knows the notice at its next start, so nothing would report it again: the event saved
    with the notice is sent then, under the same id (at-least-once; the far end dedupes on it)."""
    config, ctx = setting
    w = Watcher(config, Logger("watcher", stream=io.StringIO()), ctx)

    def dies(ev: dict) -> None:
        raise Killed

    w.spool.commit = dies
    now = time.time()
    try:
        w.observe(Notice("n1", "reclaim", "node-a", "i-1", now, now + 60, "sco", channel="relay"), now)
    except Killed:
        pass
    assert [n["id"] for n in ujson.loads((tmp_path / "state" / "notice.json").read_bytes())["active"]] == ["n1"]
    assert "notice.received" not in Path(w.spool.journal.path).read_text()
    for sock in (w.pub, w.progress_sub, w.verdict_sub, w.spool.sock):
        sock.close(linger=0)
    w.spool.journal.close()

    out = io.StringIO()
    again = Watcher(config, Logger("watcher", stream=out), ctx)
    pending = [ev for _, ev in again.spool.outbox.pending.values() if ev["type"].startswith("notice.")]
    assert [(ev["type"], ev["notice_id"]) for ev in pending] == [("notice.received", "n1")]
    emitted = [ujson.loads(line) for line in out.getvalue().splitlines() if '"event.emitted"' in line]
    assert pending[0]["event_id"] in [e["event_id"] for e in emitted]
    # Journalled now: a second kill before the spool's ack loses it no more than the first did.
    again.spool.journal.close()
    replayed = journal.Journal(again.spool.journal.path).replayed
    assert [ev["event_id"] for ev in replayed if ev["type"] == "notice.received"] == [pending[0]["event_id"]]
    for sock in (again.pub, again.progress_sub, again.verdict_sub, again.spool.sock):
        sock.close(linger=0)


def test_a_saved_notice_whose_event_was_journalled_is_saved_again_without_it(tmp_path, setting):
    """The events ride in the state file only until the journal has them: the next save leaves them out,
    so a later start does not send them again."""
    config, ctx = setting
    w = Watcher(config, Logger("watcher", stream=io.StringIO()), ctx)
    now = time.time()
    w.observe(Notice("n1", "reclaim", "node-a", "i-1", now, now + 60, "sco", channel="relay"), now)
    saved = ujson.loads((tmp_path / "state" / "notice.json").read_bytes())
    assert [ev["type"] for ev in saved["unreported"]] == ["notice.received"]
    w.observe(Notice("n2", "reclaim", "node-a", "i-1", now, now + 60, "sco", channel="relay"), now)
    saved = ujson.loads((tmp_path / "state" / "notice.json").read_bytes())
    assert [(ev["type"], ev["notice_id"]) for ev in saved["unreported"]] == [("notice.received", "n2")]
