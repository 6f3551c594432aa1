"""The executor's view of the verifier's escalation levels (verifier.pub, topic escalate)."""
from __future__ import annotations

import pytest

from executor.escalation import parse


def test_parse_takes_the_level_of_each_notice_and_skips_unknown_ones():
    body = {"notices": {"a": {"level": "checkpoint_over", "since": 1.0}, "b": "final",
                        "c": {"level": "panic"}, "d": 7}}
    assert parse(body) == {"a": "checkpoint_over", "b": "final"}


def test_parse_refuses_a_message_without_notices():
    with pytest.raises(ValueError):
        parse({"notices": []})
