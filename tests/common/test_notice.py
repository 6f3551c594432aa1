"""Relay payload validation (DESIGN section 3) and time parsing."""
from __future__ import annotations

import pytest
import ujson
from hypothesis import given
from hypothesis import strategies as st

from common.notice import Notice, Rejected, derived_id, notice_from_dict, parse_relay_payload, relay_subjects
from common.timefmt import format_rfc3339, parse_rfc3339
from tests.support.fuzzing import fuzz

GOOD = {"v": 1, "id": "n-1", "kind": "reclaim", "node": "node-a", "instance_id": "i-1",
        "issued_at": "2026-11-29T12:00:00Z", "deadline": "2026-11-29T12:02:00Z", "source": "aws"}


def payload(**changes):
    d = dict(GOOD)
    d.update(changes)
    return ujson.dumps(d).encode()


def test_good_payload_parses():
    n = parse_relay_payload(payload())
    assert n.id == "n-1" and n.kind == "reclaim" and n.node == "node-a"
    assert n.deadline - n.issued_at == 120.0


@pytest.mark.parametrize("raw,reason", [
    (b"{not json", "bad_json"),
    (b"[1,2]", "bad_shape"),
    (payload(v=2), "bad_version"),
    (payload(id=5), "bad_field"),
    (payload(kind="explode"), "bad_kind"),
    (payload(deadline="tomorrow"), "bad_time"),
    (payload(deadline="2026-11-29T12:02:00"), "bad_time"),   # no offset: refuse to guess
    (payload(node=""), "bad_field"),
    (payload(source=["x"]), "bad_field"),
    (b"\xff\xfe", "bad_json"),
])
def test_bad_payloads_are_rejected_with_a_reason(raw, reason):
    with pytest.raises(Rejected) as e:
        parse_relay_payload(raw)
    assert e.value.reason == reason


def test_oversized_payload_is_rejected_unparsed():
    with pytest.raises(Rejected) as e:
        parse_relay_payload(b" " * 9000 + payload())
    assert e.value.reason == "too_large"


def test_round_trip_through_dict():
    n = parse_relay_payload(payload()).with_arrival("relay", 1000.5)
    assert notice_from_dict(n.to_dict()) == n


def test_derived_id_is_stable_and_content_bound():
    a = derived_id("aws", "i-1", "reclaim", "2026-11-29T12:02:00Z")
    assert a == derived_id("aws", "i-1", "reclaim", "2026-11-29T12:02:00Z")
    assert a != derived_id("aws", "i-1", "reclaim", "2026-11-29T12:02:05Z")


def test_subjects_replace_dots():
    assert relay_subjects("h1", "ip-10-0-0-1.ec2.internal") == (
        "sco.notice.h1.ip-10-0-0-1_ec2_internal", "sco.notice.h1.all")


def test_rfc3339_offsets_and_fractions():
    assert parse_rfc3339("2026-11-29T12:00:00+01:00") == parse_rfc3339("2026-11-29T11:00:00Z")
    assert parse_rfc3339("2026-11-29T12:00:00.250Z") % 1 == pytest.approx(0.25)
    assert format_rfc3339(parse_rfc3339("2026-11-29T12:00:00.250Z")) == "2026-11-29T12:00:00.250Z"


@fuzz(300)
@given(st.binary(max_size=2000))
def test_fuzz_bytes_never_crash(raw):
    """Any bytes: a Notice or a Rejected with a reason, nothing else."""
    try:
        assert isinstance(parse_relay_payload(raw), Notice)
    except Rejected as e:
        assert e.reason


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                           max_leaves=10)


@fuzz(300)
@given(st.dictionaries(st.sampled_from(list(GOOD) + ["x"]), json_values, max_size=10))
def test_fuzz_shapes_never_crash(doc):
    try:
        parse_relay_payload(ujson.dumps(doc).encode())
    except Rejected as e:
        assert e.reason
