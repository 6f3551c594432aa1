"""The watcher's notice.json: the book of notices, the boot it was written in, and the events saved
with it until the journal has them (``Watcher.persist`` writes it; ``load`` reads it back)."""
from __future__ import annotations

import time
from typing import Any

from common import journal, state_file
from common.log import Logger
from watcher.notice_book import NoticeBook

STATE_FILE = "notice.json"
# The book at its bounds (notice_book.MAX_ACTIVE notices, MAX_WITHDRAWN ids, every field at its
# longest, ASCII) is about 1.3 MB (tests/watcher/test_notice_state_bounds.py -s); a larger book is not
# saved (state.too_large: the last readable file is kept), so a restart can always read it.
MAX_STATE = 4 << 20


def load(state: state_file.Kept, node: str, boot_id: str, log: Logger) -> tuple[NoticeBook, str, list[dict[str, Any]]]:
    """The persisted book, the boot it was written in ("" if unknown) and the events saved with it."""
    # A corrupt state file must not stop the watcher: start empty, the
    # channels will re-deliver a live notice within one poll.
    doc = state.load()
    if doc is None:
        return NoticeBook(node=node, created_at=time.time()), boot_id, []
    try:
        book = NoticeBook.restore(node, doc)
    except (ValueError, TypeError, AttributeError) as e:
        log.error("state.corrupt", path=state.path, error=str(e)[:300])
        return NoticeBook(node=node, created_at=time.time()), boot_id, []
    events, left_out = saved_events(doc)
    if left_out:
        log.error("state.unreported_malformed", path=state.path, kept=len(events), left_out=left_out)
    return book, str(doc.get("boot_id", "")), events


def saved_events(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The events a state file holds beside its book (``Watcher.persist``), and how many entries
    were not one (a value that is not a list counts as one): left out, the book is still good."""
    saved = doc.get("unreported") or []
    if not isinstance(saved, list):
        return [], 1
    events = [ev for ev in saved if journal.is_event(ev)]
    return events, len(saved) - len(events)
