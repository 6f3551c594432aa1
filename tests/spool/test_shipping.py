"""The shipper's pure decisions: what an answer means, how long to wait, where to ship."""
from __future__ import annotations

import random

import pytest

from spool.shipping import BACKOFF_CAP_S, SHIP_TIMEOUT_S, backoff_s, choose_sink, classify, retry_after_s


@pytest.mark.parametrize("status,verdict", [
    (200, "ok"), (202, "ok"), (204, "ok"),
    (None, "retry"), (500, "retry"), (503, "retry"), (429, "retry"), (408, "retry"),
    (400, "reject"), (413, "reject"), (422, "reject"),
    # The endpoint is wrong, not the records: splitting would set every record aside.
    (404, "retry"), (405, "retry"), (401, "retry"), (403, "retry"), (415, "retry"), (301, "retry"),
])
def test_classify(status: int | None, verdict: str) -> None:
    assert classify(status) == verdict


def test_backoff_grows_is_capped_and_never_near_zero() -> None:
    rng = random.Random(7)
    for failures in range(40):
        ceiling = min(BACKOFF_CAP_S, 0.5 * 2 ** failures)
        delays = [backoff_s(failures, rng) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert len({round(backoff_s(10, rng), 6) for _ in range(20)}) > 1   # jittered, not in step


def test_retry_after_seconds_are_honoured_but_capped() -> None:
    assert retry_after_s("3") == 3.0
    assert retry_after_s("86400") == BACKOFF_CAP_S
    assert retry_after_s(None) is None
    assert retry_after_s("Wed, 21 Oct 2026 07:28:00 GMT") is None


def test_the_contract_sink_wins_over_the_configured_one() -> None:
    assert choose_sink("http://cfg/events", "http://contract/events") == "http://contract/events"
    assert choose_sink("http://cfg/events", None) == "http://cfg/events"
    assert choose_sink("", None) is None


def test_ship_timeout_outlasts_kafkas_message_timeout() -> None:
    """Vector may hold an answer for the kafka sink's message_timeout_ms (30 s in deploy/vector)."""
    assert SHIP_TIMEOUT_S > 30.0
