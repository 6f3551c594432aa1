"""Times on the wire: whatever parses can be written back and parses to the same instant."""
from __future__ import annotations

import pytest
from hypothesis import given

from common.timefmt import format_rfc3339, parse_gmt, parse_rfc3339
from tests.fuzzing import fuzz, gmt_texts, rfc3339_texts, times


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


@pytest.mark.parametrize("text", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59",
                                  "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z"])
def test_times_that_cannot_be_written_back_are_refused(text):
    """Found by the property above: these parsed, then crashed every process that formatted them."""
    with pytest.raises(ValueError, match="outside 1970..9999"):
        parse_rfc3339(text)


def test_the_whole_range_still_parses():
    assert parse_rfc3339("1970-01-01T00:00:00Z") == 0.0
    assert format_rfc3339(parse_rfc3339("9999-12-31T23:59:59.500Z")) == "9999-12-31T23:59:59.500Z"
    assert parse_gmt("31 Dec 9999 23:59:59 GMT") == parse_rfc3339("9999-12-31T23:59:59Z")
