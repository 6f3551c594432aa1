"""watcher.notice_file: notice.json read back -- the events saved beside the book survive only in
their own shape; whatever else is there is said and left out, and the book is kept."""
from __future__ import annotations

import io
import json
import time

import pytest

from common import state_file
from common.log import Logger
from common.notice import Notice
from watcher import notice_file
from watcher.notice_book import NoticeBook

NODE = "node-a"
EVENT = {"event_id": "e-1", "type": "notice.received", "notice_id": "n1", "seq": 1}


def saved(tmp_path, unreported: object) -> tuple[NoticeBook, str, list, str]:
    now = time.time()
    book = NoticeBook(node=NODE, created_at=now)
    book.observe(Notice("n1", "reclaim", NODE, "i-1", now, now + 60, "sco", channel="relay"), now)
    doc = {**book.snapshot(), "boot_id": "b-1", "unreported": unreported}
    path = tmp_path / "notice.json"
    path.write_text(json.dumps(doc))
    out = io.StringIO()
    kept = state_file.Kept(str(path), str(tmp_path / "fallback.json"), notice_file.MAX_STATE, Logger("watcher", stream=out))
    loaded, boot, events = notice_file.load(kept, NODE, "b-now", Logger("watcher", stream=out))
    return loaded, boot, events, out.getvalue()


def test_the_events_saved_with_the_book_come_back_whole(tmp_path):
    book, boot, events, log = saved(tmp_path, [EVENT])
    assert list(book.active) == ["n1"] and boot == "b-1" and events == [EVENT]
    assert "state.unreported_malformed" not in log


@pytest.mark.parametrize("unreported", [
    "not a list", 7, {"event_id": "e-1"}, [EVENT, "x", None, 3, [], {"event_id": 1, "type": "t"},
                                          {"type": "notice.received"}, {"event_id": "e-2", "type": ["t"]}],
])
def test_hostile_saved_events_are_said_and_left_out_and_the_book_is_kept(tmp_path, unreported):
    book, boot, events, log = saved(tmp_path, unreported)
    assert list(book.active) == ["n1"] and boot == "b-1"
    assert events == ([EVENT] if isinstance(unreported, list) else [])
    assert "state.unreported_malformed" in log
