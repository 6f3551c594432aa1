"""The watcher's core: one notice whatever the channels, withdrawals, other nodes."""
from __future__ import annotations

from common.notice import Notice
from watcher.notice_book import NoticeBook


def notice(**kw) -> Notice:
    base = {"id": "n1", "kind": "reclaim", "node": "me", "instance_id": "i-1", "issued_at": 1000.0,
                "deadline": 1120.0, "source": "aws", "channel": "relay", "received_at": 0.0}
    base.update(kw)
    return Notice(**base)


def test_new_notice_takes_receive_time():
    book = NoticeBook("me")
    out = book.observe(notice(), now=1001.0)
    assert out.action == "new" and book.active["n1"].received_at == 1001.0


def test_same_reclaim_on_metadata_is_a_duplicate_and_keeps_first_arrival():
    book = NoticeBook("me")
    book.observe(notice(), now=1001.0)
    out = book.observe(notice(id="aws-xyz", channel="metadata", deadline=1120.4), now=1003.0)
    assert out.action == "duplicate" and out.earlier.id == "n1"
    assert list(book.active) == ["n1"] and book.active["n1"].received_at == 1001.0


def test_repeat_poll_is_a_duplicate():
    book = NoticeBook("me")
    book.observe(notice(id="aws-1", channel="metadata"), now=1001.0)
    gen = book.gen
    assert book.observe(notice(id="aws-1", channel="metadata"), now=1006.0).action == "duplicate"
    assert book.gen == gen


def test_different_deadline_is_another_notice():
    book = NoticeBook("me")
    book.observe(notice(), now=1001.0)
    assert book.observe(notice(id="n2", deadline=2000.0), now=1002.0).action == "new"


def test_other_node_is_ignored_and_hall_wide_accepted():
    book = NoticeBook("me")
    assert book.observe(notice(node="other"), now=1.0).reason == "other_node"
    assert book.observe(notice(node="*"), now=1.0).action == "new"


def test_cancel_withdraws_and_a_late_duplicate_does_not_revive():
    book = NoticeBook("me")
    book.observe(notice(), now=1001.0)
    out = book.observe(notice(kind="cancel"), now=1002.0)
    assert out.action == "withdrawn" and not book.active
    assert book.observe(notice(), now=1003.0).reason == "withdrawn"


def test_cancel_of_unknown_is_ignored():
    assert NoticeBook("me").observe(notice(kind="cancel"), now=1.0).reason == "cancel_unknown"


def test_snapshot_restore_round_trip_drops_other_nodes():
    book = NoticeBook("me")
    book.observe(notice(), now=1001.0)
    snap = book.snapshot()
    snap["active"].append(notice(id="x", node="other", deadline=5000.0).to_dict())
    again = NoticeBook.restore("me", snap)
    assert list(again.active) == ["n1"] and again.active["n1"].received_at == 1001.0
