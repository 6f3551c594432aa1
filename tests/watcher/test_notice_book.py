"""The watcher's core (watcher.notice_book): one notice whatever the channels, aliases, per-channel
arrivals, withdrawals, other nodes, bounds, restore."""
from __future__ import annotations

from functools import partial

from tests.support import notices
from watcher import notice_book
from watcher.notice_book import NoticeBook

# Every notice of these tests: issued at 1000, deadline 1120, for node "me"; fields override.
notice = partial(notices.notice, node="me", now=1000.0, received_at=0.0)


def test_second_channel_records_its_arrival_once_and_keeps_the_first():
    """The relay hears it first; the metadata poll repeats it every round: one notice, two arrivals."""
    book = NoticeBook("me")
    book.observe(notice(), now=1001.0)
    first = book.observe(notice(id="aws-x", channel="metadata", received_at=1003.0), now=1003.0)
    again = book.observe(notice(id="aws-x", channel="metadata", received_at=1008.0), now=1008.0)
    assert first.action == again.action == "duplicate"
    assert first.first_on_channel and not again.first_on_channel
    assert list(book.active) == ["n1"] and book.active["n1"].received_at == 1001.0
    assert book.arrivals["n1"] == {"relay": 1001.0, "metadata": 1003.0}
    assert book.snapshot()["arrivals"]["n1"] == {"relay": 1001.0, "metadata": 1003.0}


def test_withdrawal_by_the_other_channels_id_finds_the_notice():
    """Metadata saw it second (an alias); its withdrawal still withdraws the one notice."""
    book = NoticeBook("me")
    book.observe(notice(kind="maintenance"), now=1.0)
    book.observe(notice(id="aws-m", kind="maintenance", channel="metadata"), now=2.0)
    out = book.withdraw("aws-m", now=3.0)
    assert out is not None and out.action == "withdrawn" and out.notice.id == "n1"
    assert not book.active and {"n1", "aws-m"} <= set(book.withdrawn)
    # Neither channel can revive it.
    assert book.observe(notice(id="aws-m", kind="maintenance", channel="metadata"), now=4.0).reason == "withdrawn"


def test_relay_cancel_by_alias_withdraws():
    book = NoticeBook("me")
    book.observe(notice(id="aws-1", channel="metadata"), now=1.0)
    book.observe(notice(id="relay-1"), now=2.0)
    assert book.observe(notice(id="relay-1", kind="cancel"), now=3.0).action == "withdrawn"
    assert not book.active


def test_cancel_that_overtakes_its_notice_is_remembered():
    book = NoticeBook("me")
    assert book.observe(notice(kind="cancel"), now=1.0).reason == "cancel_unknown"
    assert book.observe(notice(), now=2.0).reason == "withdrawn"
    assert not book.active


def test_same_channel_two_ids_same_deadline_are_two_notices():
    """Two maintenance events in one window are two events, not one."""
    book = NoticeBook("me")
    book.observe(notice(id="aws-a", kind="maintenance", channel="metadata"), now=1.0)
    out = book.observe(notice(id="aws-b", kind="maintenance", channel="metadata"), now=1.0)
    assert out.action == "new" and set(book.active) == {"aws-a", "aws-b"}


def test_other_instance_is_not_the_same_reclaim():
    book = NoticeBook("me")
    book.observe(notice(), now=1.0)
    assert book.observe(notice(id="x", channel="metadata", instance_id="i-2"), now=2.0).action == "new"


def test_kinds_are_kept_apart():
    """A rebalance and a reclaim with the same deadline are two notices (cordon, then drain)."""
    book = NoticeBook("me")
    book.observe(notice(kind="rebalance"), now=1.0)
    assert book.observe(notice(id="n2", channel="metadata"), now=2.0).action == "new"


def test_past_deadline_and_future_issued_at_are_still_notices():
    """A node clock that is off must not lose a notice: both are accepted as they are."""
    book = NoticeBook("me")
    late = book.observe(notice(issued_at=10.0, deadline=20.0), now=5000.0)
    early = book.observe(notice(id="n2", issued_at=9000.0, deadline=9120.0), now=5000.0)
    assert late.action == early.action == "new"


def test_active_notices_are_bounded(monkeypatch):
    monkeypatch.setattr(notice_book, "MAX_ACTIVE", 3)
    book = NoticeBook("me")
    for i in range(3):
        assert book.observe(notice(id=f"n{i}", deadline=1000.0 + 10 * i), now=1.0).action == "new"
    assert book.observe(notice(id="n9", deadline=2000.0), now=1.0).reason == "too_many_active"


def test_withdrawn_memory_is_bounded_and_ages_out(monkeypatch):
    monkeypatch.setattr(notice_book, "MAX_WITHDRAWN", 2)
    book = NoticeBook("me")
    for i in range(4):
        book.observe(notice(id=f"c{i}", kind="cancel"), now=float(i))
    assert list(book.withdrawn) == ["c2", "c3"]
    book.forget_old(now=3.0 + notice_book.WITHDRAWN_MEMORY_S + 1)
    assert not book.withdrawn


def test_gen_moves_only_when_the_active_set_does():
    book = NoticeBook("me")
    book.observe(notice(), now=1.0)
    gen = book.gen
    book.observe(notice(id="aws-x", channel="metadata"), now=2.0)
    assert book.gen == gen and book.dirty


def test_restore_keeps_aliases_and_arrivals():
    book = NoticeBook("me")
    book.observe(notice(), now=1.0)
    book.observe(notice(id="aws-x", channel="metadata"), now=2.0)
    again = NoticeBook.restore("me", book.snapshot())
    assert again.resolve("aws-x") == "n1"
    assert again.arrivals["n1"] == {"relay": 1.0, "metadata": 2.0}
    assert sorted(n.id for n in again.known_notices()) == ["aws-x", "n1"]


def test_repeated_cancel_is_quietly_ignored():
    """The sco endpoint may serve the same cancel on every poll: reported once, then quiet."""
    book = NoticeBook("me")
    book.observe(notice(), now=1.0)
    assert book.observe(notice(kind="cancel"), now=2.0).action == "withdrawn"
    assert book.observe(notice(kind="cancel"), now=7.0).reason == "withdrawn"


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
