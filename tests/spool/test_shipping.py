"""The shipper's pure decisions: what an answer means, how long to wait, where to ship, what to set aside."""
from __future__ import annotations

import random

import pytest

from spool.shipping import (
    BACKOFF_CAP_S,
    LATER,
    OK,
    POISON_STRIKES,
    REFUSED,
    SHIP_TIMEOUT_S,
    Backoff,
    Bisect,
    backoff_s,
    choose_sink,
    classify,
    message_of,
    retry_after_s,
)

SINK_REJECTED = "Contents failed to deliver to sink"
SINK_ERRORED = "Error delivering contents to sink"


@pytest.mark.parametrize("status,message,verdict", [
    (200, "", OK), (202, "", OK), (204, "", OK),
    # The sink failed (handle_batch_status): nothing about the records. Keep them all.
    (400, SINK_REJECTED, LATER), (500, SINK_ERRORED, LATER),
    (None, "", LATER), (503, "", LATER), (429, "", LATER), (408, "", LATER),
    # The content of this request: split it, find the record.
    (400, "Failed decoding body: Error parsing JSON: expected value", REFUSED),
    (422, "Failed decompressing payload with gzip decoder.", REFUSED), (413, "Payload Too Large", REFUSED),
    # A 400 we do not recognise never costs a record; nor does a wrong endpoint.
    (400, "something else", LATER), (400, "", LATER),
    (404, "Not found", LATER), (405, "", LATER), (401, "", LATER), (403, "", LATER),
    (415, "Unsupported encoding br", LATER), (301, "", LATER),
])
def test_classify(status: int | None, message: str, verdict: str) -> None:
    assert classify(status, message) == verdict


def test_message_of_reads_vectors_error_body() -> None:
    assert message_of(b'{"code":400,"message":"Contents failed to deliver to sink"}') == SINK_REJECTED
    assert message_of(b"Payload Too Large") == "Payload Too Large"
    assert message_of(b'["not", "an object"]') == '["not", "an object"]'


def test_backoff_is_full_jitter_grows_and_is_capped() -> None:
    rng = random.Random(7)
    for failures in range(40):
        ceiling = min(BACKOFF_CAP_S, 0.5 * 2 ** failures)
        delays = [backoff_s(failures, rng) for _ in range(200)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert min(delays) < ceiling / 4 < max(delays)        # the whole range, not its upper half
    assert len({round(backoff_s(10, rng), 6) for _ in range(20)}) > 1   # jittered, not in step


def test_a_streak_counts_failures_on_the_clock_it_is_given() -> None:
    now = [100.0]
    backoff = Backoff(random.Random(1), lambda: now[0], base=1.0, cap=8.0)
    delays = [backoff.next_delay() for _ in range(6)]
    assert all(0 <= d <= 8.0 for d in delays) and backoff.failures == 6
    assert backoff.next_delay(retry_after=20.0) == 20.0       # Retry-After wins when longer
    now[0] = 130.0
    assert backoff.reset() == (7, 30.0)
    assert backoff.reset() == (0, 0.0)


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


def test_a_record_refused_alone_is_set_aside_only_after_its_strikes() -> None:
    search = Bisect.of(4)
    answers = []
    while (span := search.next_range()) is not None:
        ok = not (span[0] <= 2 < span[1])
        answers.append((span, ok, search.retrying_alone()))
        search.result(ok)
    assert search.bad == [2]
    alone = [(span, retrying) for span, ok, retrying in answers if span == (2, 3)]
    assert len(alone) == POISON_STRIKES
    assert [retrying for _, retrying in alone] == [False] + [True] * (POISON_STRIKES - 1)


def test_a_record_refused_once_then_taken_is_not_set_aside() -> None:
    search = Bisect.of(1)
    search.result(False)
    assert search.next_range() == (0, 1) and search.retrying_alone()
    search.result(True)
    assert search.next_range() is None and search.bad == []
