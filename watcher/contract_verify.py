"""Whether to accept a contract bundle: pure functions over bytes and keys.

A bundle is a DSSE envelope (github.com/secure-systems-lab/dsse, protocol
v1.0)::

    {"payloadType": "application/vnd.sco.contract+json",
     "payload": "<base64 of the contract JSON>",
     "signatures": [{"keyid": "<trust file stem>", "sig": "<base64 Ed25519 signature>"}]}

Each signature is Ed25519 over PAE(payloadType, payload bytes). One signature
by one trusted key suffices (threshold 1); several may be present during a key
rotation.

Decisions documented here:

- keyid is an unauthenticated hint (the spec says so). A keyid naming a
  trusted key is checked against that key only; an empty or unknown keyid is
  tried against every trusted key, so renaming a trust file never locks a node
  out. A signature that names a trusted key and fails is ``bad_signature``; if
  every signature names a key the node does not trust and none verifies, it is
  ``unknown_key`` (the operator's cue to look at rotation).
- An equal serial with different content is refused as ``serial_reused``:
  otherwise two nodes could run different contracts under one serial, and the
  serial would stop identifying what a node does. The one exception is the
  launch subset, which shares its serial with the full bundle it was cut from:
  a current contract from 'launch' is superseded by an equal serial. An equal
  serial with equal content is accepted with ``changed=False`` (nothing to do).
- A builtin current contract never blocks anything: it was never signed.
- Every failure is a ``Rejected`` with a reason from ``REASONS`` (bounded, for
  metric labels) and a human detail; nothing here raises on bad input.

The signature check itself is a parameter (``check``, a
``watcher.ed25519_check.SignatureCheck``): in-process by default, in a child
process in the watcher. ``cryptography`` (Ed25519: the standard library has
none) is imported only on the first in-process check, so importing this module
stays cheap.
"""
from __future__ import annotations

import binascii
from base64 import b64decode
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ujson

from common.contract import BUILTIN, Contract
from watcher.ed25519_check import SignatureCheck, check_here

PAYLOAD_TYPE = "application/vnd.sco.contract+json"
MAX_ENVELOPE_BYTES = 256 * 1024  # a full bundle is ~1 KiB; this bounds memory and parse time
MAX_SIGNATURES = 8  # each unknown keyid costs one check per trusted key: bound the work

# Every reason a bundle can be refused for, local or fetched. Metric labels: keep bounded.
FETCH_ERRORS = (
    "fetch_error:404", "fetch_error:4xx", "fetch_error:500", "fetch_error:5xx",
    "fetch_error:status", "fetch_error:timeout", "fetch_error:refused",
    "fetch_error:network", "fetch_error:protocol",
)
REASONS = frozenset((
    "too_large", "truncated", "malformed_json", "malformed_envelope", "wrong_payload_type",
    "malformed_base64", "unknown_key", "bad_signature", "invalid_contract", "wrong_scope",
    "lower_serial", "serial_reused", "unreadable",
) + FETCH_ERRORS)


@dataclass(frozen=True, slots=True)
class NodeScope:
    """Which bundles are for this node: its hall exactly; its class, or a bundle for class '*'."""

    hall: str
    node_class: str


@dataclass(frozen=True, slots=True)
class Envelope:
    """A parsed, not yet verified, envelope."""

    payload_type: str
    payload: bytes
    signatures: tuple[tuple[str, bytes], ...]  # (keyid, signature)


@dataclass(frozen=True, slots=True)
class Opened:
    """A verified bundle: its contract, the key that signed it, and the exact envelope bytes."""

    contract: Contract
    keyid: str
    envelope: bytes


@dataclass(frozen=True, slots=True)
class Accepted:
    """Adopt ``contract``. ``changed`` False: the same contract again, nothing to persist or publish."""

    contract: Contract
    envelope: bytes
    keyid: str
    changed: bool


@dataclass(frozen=True, slots=True)
class Rejected:
    """Keep the current contract. ``reason`` is in REASONS; ``detail`` is for humans."""

    reason: str
    detail: str


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE pre-authentication encoding: the bytes a signature covers."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(type_bytes), type_bytes, len(body), body)


def parse_envelope(raw: bytes) -> Envelope | Rejected:
    """Parse (not verify) an envelope; every failure is a Rejected, never an exception."""
    doc = _envelope_object(raw)
    if isinstance(doc, Rejected):
        return doc
    payload_type, payload_b64, sigs = doc.get("payloadType"), doc.get("payload"), doc.get("signatures")
    if not isinstance(payload_type, str) or not isinstance(payload_b64, str):
        return Rejected("malformed_envelope", "payloadType and payload must be strings")
    if not isinstance(sigs, list) or not 1 <= len(sigs) <= MAX_SIGNATURES:
        return Rejected("malformed_envelope", f"signatures must be a list of 1 to {MAX_SIGNATURES}")
    if payload_type != PAYLOAD_TYPE:
        return Rejected("wrong_payload_type", f"payloadType {payload_type[:80]!r}, want {PAYLOAD_TYPE!r}")
    signatures = _signatures(sigs)
    if isinstance(signatures, Rejected):
        return signatures
    payload = b64decode_either(payload_b64)
    if payload is None:
        return Rejected("malformed_base64", "payload is not base64")
    return Envelope(payload_type, payload, signatures)


def _envelope_object(raw: bytes) -> dict[str, Any] | Rejected:
    """The envelope's JSON object, or why the bytes are none."""
    if len(raw) > MAX_ENVELOPE_BYTES:
        return Rejected("too_large", f"{len(raw)} bytes, limit {MAX_ENVELOPE_BYTES}")
    try:
        doc = ujson.loads(raw)
    except ValueError as exc:
        # An envelope is one JSON object: empty input, or an object that never
        # closes, is a cut-off write or download rather than a wrong format.
        stripped = raw.strip()
        if not stripped or (stripped[:1] == b"{" and stripped[-1:] != b"}"):
            return Rejected("truncated", f"input ends early ({len(raw)} bytes)")
        return Rejected("malformed_json", f"envelope: {exc}"[:200])
    if not isinstance(doc, dict):
        return Rejected("malformed_envelope", "envelope is not a JSON object")
    return doc


def _signatures(sigs: list[Any]) -> tuple[tuple[str, bytes], ...] | Rejected:
    """The (keyid, signature bytes) pairs of the envelope's ``signatures``, in order."""
    signatures = []
    for i, entry in enumerate(sigs):
        keyid = entry.get("keyid", "") if isinstance(entry, dict) else None
        if not isinstance(keyid, str) or not isinstance(entry.get("sig"), str):
            return Rejected("malformed_envelope", f"signatures[{i}] needs a string 'sig' (and 'keyid')")
        sig = b64decode_either(entry["sig"])
        if sig is None:
            return Rejected("malformed_base64", f"signatures[{i}].sig is not base64")
        signatures.append((keyid, sig))
    return tuple(signatures)


def b64decode_either(text: str) -> bytes | None:
    """Standard or URL-safe base64 (DSSE allows both), padding optional; None if neither."""
    if ("-" in text or "_" in text) and ("+" in text or "/" in text):
        return None  # a mix of both alphabets is no encoding at all
    text = text.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def verify_signatures(env: Envelope, trusted_keys: Mapping[str, bytes],
                      check: SignatureCheck = check_here) -> str | Rejected:
    """The keyid of the first trusted key that verifies a signature, else why not."""
    if not trusted_keys:
        return Rejected("unknown_key", "no trusted keys are loaded")
    message = pae(env.payload_type, env.payload)
    named_trusted = False
    candidates: list[tuple[str, bytes, bytes]] = []   # (keyid, public key, signature), in trial order
    for keyid, sig in env.signatures:
        if keyid in trusted_keys:
            named_trusted = True
            candidates.append((keyid, trusted_keys[keyid], sig))
        else:
            candidates += [(kid, public, sig) for kid, public in trusted_keys.items()]
    first = check(message, [(public, sig) for _, public, sig in candidates])
    if first is not None:
        return candidates[first][0]
    keyids = sorted({k for k, _ in env.signatures})
    shown = [k[:40] for k in keyids[:4]]  # keyids are untrusted input: bound the detail
    if not named_trusted and "" not in keyids:
        return Rejected("unknown_key", f"signed by {shown}, none trusted")
    return Rejected("bad_signature", f"no trusted key verifies it (keyids {shown})")


def open_bundle(raw: bytes, trusted_keys: Mapping[str, bytes], source: str = "bundle",
                check: SignatureCheck = check_here) -> Opened | Rejected:
    """Parse, verify, then validate: the contract inside a bundle, scope and serial not yet judged."""
    env = parse_envelope(raw)
    if isinstance(env, Rejected):
        return env
    keyid = verify_signatures(env, trusted_keys, check)
    if isinstance(keyid, Rejected):
        return keyid
    # Only signed bytes are parsed further (the DSSE verification order).
    try:
        payload = ujson.loads(env.payload)
    except ValueError as exc:
        return Rejected("malformed_json", f"payload: {exc}"[:200])
    try:
        contract = Contract.from_payload(payload, source=source)
    except ValueError as exc:
        return Rejected("invalid_contract", str(exc)[:300])
    return Opened(contract, keyid, raw)


def decide(
    current: Contract | None,
    candidate: bytes,
    scope: NodeScope,
    trusted_keys: Mapping[str, bytes],
    source: str = "bundle",
    check: SignatureCheck = check_here,
) -> Accepted | Rejected:
    """Accept ``candidate`` over ``current`` or say why not. ``current`` is untouched either way."""
    opened = open_bundle(candidate, trusted_keys, source, check)
    if isinstance(opened, Rejected):
        return opened
    new = opened.contract
    if new.hall != scope.hall or new.node_class not in ("*", scope.node_class):
        return Rejected(
            "wrong_scope",
            f"bundle is for hall {new.hall!r} class {new.node_class!r}; "
            f"node is hall {scope.hall!r} class {scope.node_class!r}",
        )
    if current is None or current.source == "builtin" or new.serial > current.serial:
        return Accepted(new, candidate, opened.keyid, changed=True)
    if new.serial < current.serial:
        return Rejected("lower_serial", f"serial {new.serial} < current {current.serial}")
    if current.source == "launch":
        return Accepted(new, candidate, opened.keyid, changed=True)
    if new == current:
        return Accepted(new, candidate, opened.keyid, changed=False)
    return Rejected("serial_reused", f"serial {new.serial} already names a different contract")


@dataclass(frozen=True, slots=True)
class Startup:
    """The contract to start on, and what became of each local candidate (None: file absent)."""

    contract: Contract
    envelope: bytes | None  # the verified bundle behind ``contract``; None for BUILTIN
    launch: Accepted | Rejected | None
    lkg: Accepted | Rejected | None


def choose_startup(
    launch_raw: bytes | Rejected | None,
    lkg_raw: bytes | Rejected | None,
    scope: NodeScope,
    trusted_keys: Mapping[str, bytes],
    check: SignatureCheck = check_here,
) -> Startup:
    """Start on the LKG if it verifies and its serial is not below the launch subset's,
    else on the launch subset, else on BUILTIN (the caller says so loudly).

    ``*_raw`` is the file's bytes, None if it does not exist, or a Rejected if it
    could not be read. The launch subset goes first so the LKG is judged against
    it with the ordinary rule: equal serial supersedes, lower is refused.
    """
    contract, envelope = BUILTIN, None
    outcomes: list[Accepted | Rejected | None] = []
    for raw, source in ((launch_raw, "launch"), (lkg_raw, "bundle")):
        outcome = raw if not isinstance(raw, bytes) else decide(
            None if envelope is None else contract, raw, scope, trusted_keys, source, check)
        if isinstance(outcome, Accepted):
            contract, envelope = outcome.contract, outcome.envelope
        outcomes.append(outcome)
    return Startup(contract, envelope, launch=outcomes[0], lkg=outcomes[1])
