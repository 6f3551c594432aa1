"""watcher.contract_verify: DSSE parsing, signatures, and the accept decision."""
from __future__ import annotations

import json

import pytest

from common.contract import BUILTIN, Contract
from tests.support.contract_bundles import SCOPE, Key, b64, payload
from watcher.contract_verify import (
    MAX_ENVELOPE_BYTES,
    PAYLOAD_TYPE,
    REASONS,
    Accepted,
    Envelope,
    NodeScope,
    Rejected,
    b64decode_either,
    choose_startup,
    decide,
    pae,
    parse_envelope,
    verify_signatures,
)

# From the DSSE specification (github.com/secure-systems-lab/dsse): protocol.md's
# worked example, and testvectors/vectors.json (Ed25519 key "A" is RFC 8032's test 1 key).
SPEC_PAE = b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
VECTOR_KEY_A = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
VECTORS = [  # (id, payloadType, payload b64, sig b64, expected PAE hex)
    ("single-signature", "application/vnd.in-toto+json",
     "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEifQ==",
     "2WAfaHm5jluo0w+0rk8uVkluELJYWjSmU9x7EUzx+AyteDGJ4/nqyJXfmAUVFIAoQafWm7AxBZNw5M9ixNHiCA==",
     ("445353457631203238206170706c69636174696f6e2f766e642e696e2d746f746f2b6a736f6e203433207b225f"
     "74797065223a2268747470733a2f2f696e2d746f746f2e696f2f53746174656d656e742f7631227d")),
    ("url-safe-base64", "application/vnd.in-toto+json", "-_-_Pj8=",
     "P-_KHICeR7tI6S_YyejJTRtrXhcQyQ2LYPaL8h90KjC9qN8HU_svOQ6TuDOT1HIrsGW886DbWNWcCmX5twLrAw==",
     "445353457631203238206170706c69636174696f6e2f766e642e696e2d746f746f2b6a736f6e203520fbffbf3e3f"),
    ("non-ascii-payload-type", "application/vnd.exämple+json",
     "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEifQ==",
     "xmSk/ug66ysT7ayhkCIjhAq42zgZXSsEWuzUaNL7w2eGAdF/NU6/fRXPtmfN+5DNSAs5/i2lUnHjbbjPsu0tAw==",
     ("445353457631203239206170706c69636174696f6e2f766e642e6578c3a46d706c652b6a736f6e203433207b22"
     "5f74797065223a2268747470733a2f2f696e2d746f746f2e696f2f53746174656d656e742f7631227d")),
    ("empty-payload", "application/vnd.in-toto+json", "",
     "gSggCAaTLTYyRH6FIDBem6meyIynsYy8RTHVzwx9tnTb7Bg/1jMWnuVgI/gffqmbsC2VX5/jHfkkDqsj7CDbDg==",
     "445353457631203238206170706c69636174696f6e2f766e642e696e2d746f746f2b6a736f6e203020"),
]


def test_pae_matches_the_spec_example() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == SPEC_PAE


@pytest.mark.parametrize(("name", "ptype", "body_b64", "sig_b64", "pae_hex"), VECTORS)
def test_spec_vectors_pae_and_ed25519(name: str, ptype: str, body_b64: str, sig_b64: str,
                                      pae_hex: str) -> None:
    """PAE byte-exact (lengths in UTF-8 bytes) and the signature verifies, both base64 alphabets."""
    body = b64decode_either(body_b64)
    sig = b64decode_either(sig_b64)
    assert body is not None and sig is not None
    assert pae(ptype, body).hex() == pae_hex
    assert verify_signatures(Envelope(ptype, body, (("A", sig),)), {"A": VECTOR_KEY_A}) == "A"


def test_spec_vector_with_swapped_payload_type_fails() -> None:
    """The type is inside the signed bytes: a signature for one type does not cover another."""
    _, _, body_b64, sig_b64, _ = VECTORS[0]
    env = Envelope("application/vnd.example.other+json", b64decode_either(body_b64) or b"",
                   (("A", b64decode_either(sig_b64) or b""),))
    assert verify_signatures(env, {"A": VECTOR_KEY_A}) == Rejected(
        "bad_signature", "no trusted key verifies it (keyids ['A'])")


def test_accepts_a_higher_serial(key: Key, trusted: dict[str, bytes], current: Contract) -> None:
    out = decide(current, key.bundle(payload(6)), SCOPE, trusted)
    assert isinstance(out, Accepted) and out.changed and out.keyid == key.keyid
    assert out.contract.serial == 6 and out.contract.source == "bundle"


def test_first_contract_and_builtin_never_block(key: Key, trusted: dict[str, bytes]) -> None:
    """With no contract, or only the unsigned builtin one, any valid bundle is taken."""
    for current in (None, BUILTIN):
        out = decide(current, key.bundle(payload(0)), SCOPE, trusted)
        assert isinstance(out, Accepted) and out.contract.serial == 0


def test_same_bundle_again_is_accepted_unchanged(key: Key, trusted: dict[str, bytes],
                                                 current: Contract) -> None:
    out = decide(current, key.bundle(payload(5)), SCOPE, trusted)
    assert isinstance(out, Accepted) and not out.changed and out.contract == current


def test_equal_serial_supersedes_the_launch_subset(key: Key, trusted: dict[str, bytes]) -> None:
    """The launch subset shares its serial with the full bundle it was cut from."""
    launch = Contract.from_payload({k: payload(5)[k] for k in ("serial", "hall", "issued_at", "drain")},
                                   source="launch")
    out = decide(launch, key.bundle(payload(5)), SCOPE, trusted)
    assert isinstance(out, Accepted) and out.changed and out.contract.pdb_blocked == "delete"


def test_class_wildcard_bundle_matches_any_class(key: Key, trusted: dict[str, bytes]) -> None:
    out = decide(None, key.bundle(payload(1, node_class="*")), SCOPE, trusted)
    assert isinstance(out, Accepted)


def test_multiple_signatures_one_trusted_suffices(key: Key) -> None:
    """During rotation a bundle may carry an old and a new signature; one trusted one is enough."""
    other = Key("ops-2025")
    body = json.dumps(payload(6)).encode()
    env = json.dumps({"payloadType": PAYLOAD_TYPE, "payload": b64(body), "signatures": [
        {"keyid": other.keyid, "sig": b64(other.sign(body))},
        {"keyid": key.keyid, "sig": b64(key.sign(body))},
    ]}).encode()
    out = decide(None, env, SCOPE, {key.keyid: key.raw_public})
    assert isinstance(out, Accepted) and out.keyid == key.keyid


def test_empty_or_unknown_keyid_tries_every_trusted_key(key: Key, trusted: dict[str, bytes]) -> None:
    """keyid is an unauthenticated hint: a renamed trust file must not lock the node out."""
    for keyid in ("", "some-other-name"):
        out = decide(None, key.bundle(payload(1), keyid=keyid), SCOPE, trusted)
        assert isinstance(out, Accepted) and out.keyid == key.keyid


def test_rotation(key: Key) -> None:
    """Old and new both trusted: new-signed verifies. Old removed: old-signed is unknown_key."""
    old, new = Key("ops-2025"), Key("ops-2026")
    both = {old.keyid: old.raw_public, new.keyid: new.raw_public}
    current = Contract.from_payload(payload(5))
    assert isinstance(decide(current, old.bundle(payload(6)), SCOPE, both), Accepted)
    assert isinstance(decide(current, new.bundle(payload(7)), SCOPE, both), Accepted)
    only_new = {new.keyid: new.raw_public}
    out = decide(current, old.bundle(payload(8)), SCOPE, only_new)
    assert isinstance(out, Rejected) and out.reason == "unknown_key"
    assert isinstance(decide(current, new.bundle(payload(8)), SCOPE, only_new), Accepted)


# --- every rejection: the reason, and the current contract stays as it was -----------------


def _tampered(key: Key) -> bytes:
    env = json.loads(key.bundle(payload(6)))
    env["payload"] = b64(json.dumps(payload(6, drain={
        "budget_s": 3600, "checkpoint_s": 0, "evict_s": 0, "margin_s": 0})).encode())
    return json.dumps(env).encode()


def _envelope(**fields: object) -> bytes:
    env = {"payloadType": PAYLOAD_TYPE, "payload": b64(b"{}"), "signatures": [{"keyid": "k", "sig": b64(bytes(64))}]}
    env.update(fields)
    return json.dumps(env).encode()


REJECTIONS = [
    ("bad_signature", _tampered),
    ("unknown_key", lambda key: Key("stranger").bundle(payload(6))),
    ("lower_serial", lambda key: key.bundle(payload(4))),
    ("serial_reused", lambda key: key.bundle(payload(5, pdb_blocked="report"))),
    ("wrong_scope", lambda key: key.bundle(payload(6, hall="ams1"))),
    ("wrong_scope", lambda key: key.bundle(payload(6, node_class="cpu"))),
    ("malformed_json", lambda key: b'{"payloadType": "x", "payload": , }'),
    ("malformed_json", lambda key: key.bundle(b"{not json")),
    ("invalid_contract", lambda key: key.bundle(payload(6, drain={"budget_s": 5})) ),
    ("invalid_contract", lambda key: key.bundle(b"[1, 2]")),
    ("malformed_base64", lambda key: _envelope(payload="!!!not base64!!!")),
    ("malformed_base64", lambda key: _envelope(signatures=[{"keyid": "k", "sig": "a+b-"}])),
    ("malformed_envelope", lambda key: _envelope(signatures=[])),
    ("malformed_envelope", lambda key: _envelope(signatures=[{"keyid": "k"}])),
    ("malformed_envelope", lambda key: _envelope(signatures=[{"keyid": 3, "sig": "AA=="}])),
    ("malformed_envelope", lambda key: _envelope(signatures=[{"sig": "AA=="}] * 9)),
    ("malformed_envelope", lambda key: _envelope(payload=None)),
    ("malformed_envelope", lambda key: b"[]"),
    ("wrong_payload_type", lambda key: key.bundle(payload(6), payload_type="application/json")),
    ("truncated", lambda key: key.bundle(payload(6))[:-40]),
    ("truncated", lambda key: b""),
    ("too_large", lambda key: b" " * (MAX_ENVELOPE_BYTES + 1)),
]


@pytest.mark.parametrize(("reason", "make"), REJECTIONS)
def test_rejection_keeps_the_current_contract(reason: str, make, key: Key, trusted: dict[str, bytes],
                                              current: Contract) -> None:
    before = current.to_dict()
    out = decide(current, make(key), SCOPE, trusted)
    assert isinstance(out, Rejected), out
    assert out.reason == reason, out.detail
    assert out.reason in REASONS and out.detail
    assert current.to_dict() == before and current.serial == 5


def test_a_trusted_keyid_with_a_bad_signature_is_bad_signature(key: Key, trusted: dict[str, bytes]) -> None:
    forged = json.loads(Key("attacker").bundle(payload(6), keyid=key.keyid))
    out = decide(None, json.dumps(forged).encode(), SCOPE, trusted)
    assert out == Rejected("bad_signature", f"no trusted key verifies it (keyids ['{key.keyid}'])")


def test_no_trusted_keys_rejects_everything(key: Key) -> None:
    out = decide(None, key.bundle(payload(6)), SCOPE, {})
    assert isinstance(out, Rejected) and out.reason == "unknown_key"


def test_base64_either_alphabet_padding_optional() -> None:
    assert b64decode_either("-_-_Pj8") == b"\xfb\xff\xbf>?"
    assert b64decode_either("+/+/Pj8=") == b"\xfb\xff\xbf>?"
    assert b64decode_either("+_") is None  # mixed alphabets
    assert b64decode_either("A") is None
    assert b64decode_either("ä") is None


def test_parse_envelope_returns_parts(key: Key) -> None:
    env = parse_envelope(key.bundle(b"hello"))
    assert isinstance(env, Envelope)
    assert env.payload == b"hello" and env.signatures[0][0] == key.keyid


def test_scope_compares_hall_exactly(key: Key, trusted: dict[str, bytes]) -> None:
    """A bundle for hall '*' is not for every hall; only node_class has a wildcard."""
    out = decide(None, key.bundle(payload(1, hall="*")), NodeScope("fra1", "gpu"), trusted)
    assert isinstance(out, Rejected) and out.reason == "wrong_scope"


def test_watcher_modules_load_cryptography_only_when_verifying() -> None:
    """~8 MiB: the import waits for the first signature check."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, watcher.contract_fetch, watcher.contract_store; "
            "print('cryptography' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


def test_child_check_gives_the_same_answers_without_loading_the_library():
    """The watcher's out-of-process check: same verdicts, and `cryptography` stays out of the caller."""
    import subprocess
    import sys

    k, other = Key("a"), Key("b")
    msg = b"payload"
    sig = k.private.sign(msg)
    code = f"""
import sys
from watcher.ed25519_check import check_in_child, in_child
msg = {msg!r}
pairs = [({other.raw_public!r}, {sig!r}), ({k.raw_public!r}, {sig!r})]
assert check_in_child(msg, pairs, 30) == 1
assert check_in_child(msg, pairs[:1], 30) is None
check = in_child(30)
assert check(msg, pairs) == 1
assert check(b"tampered", pairs) is None
print("cryptography" in sys.modules)
"""
    # The test's own interpreter has imported cryptography already; judge a fresh one.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_signature_check_is_the_one_passed_in(key: Key, tmp_path) -> None:
    """decide, choose_startup, apply_fetch and load_startup all use the caller's check, not a global."""
    from watcher.contract_fetch import FetchResult, RefreshState, apply_fetch
    from watcher.contract_store import load_startup

    asked: list[int] = []

    def refuse(message: bytes, candidates: list[tuple[bytes, bytes]]) -> int | None:
        asked.append(len(candidates))
        return None

    trusted = {key.keyid: key.raw_public}
    bundle = key.bundle(payload(6))
    assert isinstance(decide(None, bundle, SCOPE, trusted), Accepted)   # the default: checked here
    assert decide(None, bundle, SCOPE, trusted, check=refuse).reason == "bad_signature"
    assert choose_startup(bundle, None, SCOPE, trusted, check=refuse).contract is BUILTIN
    _, outcome = apply_fetch(RefreshState(BUILTIN), FetchResult(200, '"v6"', bundle), SCOPE, trusted, check=refuse)
    assert isinstance(outcome, Rejected) and outcome.reason == "bad_signature"
    trust = tmp_path / "trust"
    trust.mkdir(mode=0o700)
    (trust / f"{key.keyid}.pub").write_bytes(key.raw_public)
    (tmp_path / "lkg.json").write_bytes(bundle)
    loaded = load_startup(str(trust), str(tmp_path / "none.json"), str(tmp_path / "lkg.json"), SCOPE, check=refuse)
    assert loaded.startup.contract is BUILTIN and loaded.startup.lkg.reason == "bad_signature"
    assert asked == [1, 1, 1, 1]
