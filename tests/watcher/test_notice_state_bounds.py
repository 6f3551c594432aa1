"""notice.json stays loadable at the notice book's bounds, and a notice of an earlier boot whose
deadline has passed is retired at start while every other persisted notice carries on."""
from __future__ import annotations

import io
import json
import time

import ujson
import zmq

from common.log import Logger
from common.notice import Notice
from tests.watcher.conftest import make_config
from watcher import notice_book
from watcher.__main__ import MAX_STATE, STATE_FILE, Watcher
from watcher.notice_book import NoticeBook

LONGEST = 256   # common.notice._MAX_FIELD: every text field of a relay notice
NODE = "node-a"


def long_text(tag: str) -> str:
    return (tag + "-" + "x" * LONGEST)[:LONGEST]


def test_the_book_at_its_bounds_fits_the_state_file_limit():
    """MAX_ACTIVE notices with every field at its longest, each also known by two other channels'
    ids (aliases), and MAX_WITHDRAWN withdrawn ids: the snapshot is saved and loads back whole."""
    book = NoticeBook(node=NODE)
    now = time.time()
    for i in range(notice_book.MAX_ACTIVE):
        n = Notice(long_text(f"n{i}"), "maintenance", NODE, long_text("i"), now, now + 600 + i, long_text("src"),
                   channel="relay", detail=long_text("d"))
        assert book.observe(n, now).action == "new"
        for channel in ("metadata", "local"):
            alias = Notice(long_text(f"{channel}{i}"), "maintenance", NODE, n.instance_id, now, n.deadline, n.source,
                           channel=channel, detail=n.detail)
            assert book.observe(alias, now).action == "duplicate"
    for i in range(notice_book.MAX_WITHDRAWN):
        book.observe(Notice(long_text(f"w{i}"), "cancel", NODE, "", now, now, "sco"), now)
    assert len(book.active) == notice_book.MAX_ACTIVE and len(book.withdrawn) == notice_book.MAX_WITHDRAWN
    doc = book.snapshot()
    doc["boot_id"] = "0" * 36
    size = len(ujson.dumps(doc).encode())
    assert size < MAX_STATE, f"{size} bytes at the bounds, the limit is {MAX_STATE}"
    print(f"notice.json at the bounds: {size} bytes")
    assert len(NoticeBook.restore(NODE, ujson.loads(ujson.dumps(doc))).active) == notice_book.MAX_ACTIVE


def start_watcher(tmp_path, ctx: zmq.Context, out: io.StringIO) -> Watcher:
    run = tmp_path / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    config = make_config(node=NODE, paths={"runtime_dir": str(run), "state_dir": str(tmp_path / "state")},
                         contract={"trust_dir": str(tmp_path / "trust"), "launch_path": str(tmp_path / "none.json")})
    return Watcher(config, Logger("watcher", stream=out), ctx)


def test_an_earlier_boots_notice_past_its_deadline_is_retired_the_others_carry_on(tmp_path):
    now = time.time()
    past = Notice("past", "reclaim", NODE, "i-1", now - 900, now - 600, "sco", received_at=now - 720)
    ahead = Notice("ahead", "maintenance", NODE, "i-1", now - 60, now + 600, "sco", received_at=now - 50)
    ctx = zmq.Context()
    try:
        out = io.StringIO()
        w = start_watcher(tmp_path, ctx, out)
        for n in (past, ahead):
            w.observe(n, n.received_at)
        assert set(w.book.active) == {"past", "ahead"}
        w.pub.close(linger=0)
        w.progress_sub.close(linger=0)
        w.spool.sock.close(linger=0)
        # The same boot: a passed deadline retires nothing (the machine may be going any second).
        again = start_watcher(tmp_path, ctx, io.StringIO())
        assert set(again.book.active) == {"past", "ahead"}
        again.pub.close(linger=0)
        again.progress_sub.close(linger=0)
        again.spool.sock.close(linger=0)
        # Written in another boot (the machine was stopped and started again with its disk).
        path = tmp_path / "state" / STATE_FILE
        doc = json.loads(path.read_text())
        doc["boot_id"] = "an-earlier-boot"
        path.write_text(json.dumps(doc))
        out = io.StringIO()
        later = start_watcher(tmp_path, ctx, out)
        sent = []
        later.spool.commit = sent.append
        later.retire_past(time.time())   # nothing left to retire: it ran at start
        assert set(later.book.active) == {"ahead"} and "past" in later.book.withdrawn
        expired = [json.loads(line) for line in out.getvalue().splitlines() if '"notice.expired"' in line]
        assert [(e["notice_id"], e["reason"]) for e in expired] == [("past", "earlier_boot")]
        assert sent == []
        on_disk = json.loads(path.read_text())
        assert [n["id"] for n in on_disk["active"]] == ["ahead"] and on_disk["boot_id"] == later.boot_id
        # Once retired it stays retired: a channel repeating it is ignored, not drained again.
        assert later.observe(past.with_arrival("relay", time.time()), time.time()).reason == "withdrawn"
        for sock in (later.pub, later.progress_sub, later.spool.sock):
            sock.close(linger=0)
        # A new boot with nothing to retire is written down as this boot's at once.
        doc = json.loads(path.read_text())
        doc["boot_id"] = "yet-another-boot"
        path.write_text(json.dumps(doc))
        start_watcher(tmp_path, ctx, io.StringIO())
        on_disk = json.loads(path.read_text())
        assert [n["id"] for n in on_disk["active"]] == ["ahead"] and on_disk["boot_id"] == later.boot_id
    finally:
        ctx.destroy(linger=0)
