"""Times on the wire: whatever parses can be written back and parses to the same instant."""
from __future__ import annotations

import pytest
import ujson
from hypothesis import given

from common.notice import Rejected, notice_from_dict, parse_relay_payload
from common.timefmt import format_rfc3339, parse_gmt, parse_rfc3339
from tests.support.fuzzing import fuzz, gmt_texts, rfc3339_texts, times


def _round_trips(epoch: float) -> None:
    text = format_rfc3339(epoch)
    assert parse_rfc3339(text) == pytest.approx(epoch, abs=1e-3)


@fuzz(500)
@given(rfc3339_texts | times)
def test_any_rfc3339_that_parses_formats_and_parses_back(text):
    """A time the agent accepts is one every process can re-announce (notices are re-sent as RFC 3339)."""
    try:
        epoch = parse_rfc3339(text)
    except ValueError:
        return
    _round_trips(epoch)


@fuzz(300)
@given(gmt_texts | times)
def test_any_gmt_time_that_parses_formats_back(text):
    try:
        epoch = parse_gmt(text)
    except ValueError:
        return
    _round_trips(epoch)


@pytest.mark.parametrize("text", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"])
def test_times_that_cannot_be_written_back_are_refused(text):
    """Found by the property above: these parsed, then crashed every process that formatted them."""
    with pytest.raises(ValueError, match=r"outside 0001\.\.9999"):
        parse_rfc3339(text)


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00.000Z", "0999-12-31T23:59:59.000Z", "1969-12-31T23:59:59.000Z",
                                  "9999-12-31T23:59:59.500Z"])
def test_the_whole_range_round_trips(text):
    """Years below 1000 are written with four digits (strftime('%Y') wrote '999')."""
    assert format_rfc3339(parse_rfc3339(text)) == text


def test_gmt_and_rfc3339_agree_at_the_end_of_the_range():
    assert parse_gmt("31 Dec 9999 23:59:59 GMT") == parse_rfc3339("9999-12-31T23:59:59Z")


@pytest.mark.parametrize("deadline", ["0001-01-01T12:00:00Z", "9999-12-31T12:00:00Z"])
def test_a_notice_time_leaves_room_to_compute_from(deadline):
    """Found by the long fuzz run (bench/fuzz.py): times computed from a deadline (the cutoff,
    checkpoint_by: the deadline less a budget) fell outside what can be written down. A notice's
    times keep a day's room; a deadline merely long past is still a notice, drained at once."""
    good = {"v": 1, "id": "n", "kind": "reclaim", "node": "a", "issued_at": "2026-11-29T12:00:00Z",
            "deadline": "2026-11-29T12:02:00Z"}
    assert parse_relay_payload(ujson.dumps(dict(good, deadline="1970-01-01T00:00:01Z")).encode())
    with pytest.raises(Rejected) as e:
        parse_relay_payload(ujson.dumps(dict(good, deadline=deadline)).encode())
    assert e.value.reason == "bad_time"
    with pytest.raises(ValueError, match="within a day"):
        notice_from_dict(dict(good, deadline=deadline))
