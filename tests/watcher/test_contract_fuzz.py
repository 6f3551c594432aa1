"""Property tests: no input makes the bundle parser or the decision raise."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from common.contract import Contract
from tests.support.contract_bundles import SCOPE, Key, b64, payload
from tests.support.fuzzing import fuzz
from watcher.contract_verify import (
    PAYLOAD_TYPE,
    REASONS,
    Accepted,
    Envelope,
    Rejected,
    decide,
    parse_envelope,
)

KEY = Key("fuzz")
TRUSTED = {KEY.keyid: KEY.raw_public}
CURRENT = Contract.from_payload(payload(5))

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
signature = st.fixed_dictionaries({}, optional={
    "keyid": st.one_of(st.text(max_size=8), json_scalars),
    "sig": st.one_of(st.text(max_size=90), st.binary(max_size=70).map(b64), json_scalars),
})
envelopes = st.fixed_dictionaries({}, optional={
    "payloadType": st.sampled_from([PAYLOAD_TYPE, "application/json", ""]) | json_values,
    "payload": st.text(max_size=40) | st.binary(max_size=60).map(b64) | json_values,
    "signatures": st.lists(signature | json_values, max_size=10) | json_values,
})


def _check(raw: bytes) -> None:
    parsed = parse_envelope(raw)
    assert isinstance(parsed, Envelope | Rejected)
    if isinstance(parsed, Rejected):
        assert parsed.reason in REASONS
    out = decide(CURRENT, raw, SCOPE, TRUSTED)
    assert isinstance(out, Rejected | Accepted)
    if isinstance(out, Rejected):
        assert out.reason in REASONS


@fuzz(300)
@given(st.binary(max_size=300))
def test_arbitrary_bytes(raw: bytes) -> None:
    _check(raw)


@fuzz(150)
@given(envelopes)
def test_arbitrary_envelope_shapes(env: dict) -> None:
    _check(json.dumps(env).encode())


@fuzz(100)
@given(json_values, st.sampled_from(["serial", "hall", "drain", "kinds", "slurm", "issued_at",
                                     "sink_url", "taint_key", "node_class", "extra"]))
def test_signed_payloads_with_any_field_value(value: object, field: str) -> None:
    """A correctly signed bundle whose contract is nonsense is refused, never a crash."""
    _check(KEY.bundle(dict(payload(6), **{field: value})))


@fuzz(200)
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=400))
def test_cut_or_corrupted_real_bundle(noise: bytes, cut: int) -> None:
    raw = KEY.bundle(payload(6))
    _check(raw[:cut] + noise)
    _check(raw[:cut])
