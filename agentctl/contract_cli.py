"""``sco-agentctl contract ...``: make keys, sign, verify and inspect contract bundles.

    sco-agentctl contract keygen --out DIR/NAME        NAME.key (private, 0600) and NAME.pub
    sco-agentctl contract sign --key K --in payload.json --out bundle.json [--keyid ID]
    sco-agentctl contract verify --trust-dir D bundle.json [--hall H [--node-class C]]
    sco-agentctl contract show bundle.json

``main(argv)`` takes the arguments after ``contract`` and returns the exit
code: 0 success, 1 refused or failed (the reason on stdout for ``verify``,
on stderr otherwise), 2 usage. Operators and control planes run this; the
agent's own processes never import it. It judges a bundle with the watcher's
own rules (watcher.contract_verify), checking signatures in-process.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from base64 import b64encode
from typing import TextIO

from common.contract import Contract
from common.fsutil import read_bounded, write_atomic
from watcher.contract_store import TrustDirError, load_trust_dir
from watcher.contract_verify import (
    MAX_ENVELOPE_BYTES,
    PAYLOAD_TYPE,
    Accepted,
    NodeScope,
    Opened,
    Rejected,
    decide,
    open_bundle,
    pae,
    parse_envelope,
)


class CliError(Exception):
    """A failure worth one line on stderr and exit 1."""


def main(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run one subcommand; streams are parameters so tests can capture them."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help (0) and on bad usage (2)
        return int(exc.code or 0)
    try:
        status: int = args.run(args, out, err)
        return status
    except CliError as exc:
        print(f"sco-agentctl contract {args.command}: {exc}", file=err)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sco-agentctl contract",
                                     description="Contract bundle keys, signing and checks.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("keygen", help="make an Ed25519 key pair: NAME.key (0600) and NAME.pub")
    p.add_argument("--out", required=True, help="DIR/NAME; the keyid will be NAME")
    p.set_defaults(run=_keygen)
    p = sub.add_parser("sign", help="validate a contract payload and sign it into a DSSE bundle")
    p.add_argument("--key", required=True, help="private key file from keygen")
    p.add_argument("--in", dest="input", required=True, help="contract payload JSON")
    p.add_argument("--out", required=True, help="bundle file to write")
    p.add_argument("--keyid", help="keyid to record (default: the key file's name without .key)")
    p.set_defaults(run=_sign)
    p = sub.add_parser("verify", help="check a bundle as an agent would (exit 0 accepted, 1 refused)")
    p.add_argument("--trust-dir", required=True, help="directory of trusted NAME.pub files")
    p.add_argument("--hall", help="also check the bundle is for this hall")
    p.add_argument("--node-class", default="*", help="with --hall: the node's class")
    p.add_argument("bundle")
    p.set_defaults(run=_verify)
    p = sub.add_parser("show", help="print a bundle's payload, keyids and serial (not verified)")
    p.add_argument("bundle")
    p.set_defaults(run=_show)
    return parser


def _keygen(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    key_path, pub_path = args.out + ".key", args.out + ".pub"
    for path in (key_path, pub_path):
        if os.path.exists(path):
            raise CliError(f"{path} exists; refusing to overwrite a key")
    try:
        write_atomic(key_path, private, mode=0o600)
        write_atomic(pub_path, public, mode=0o644)
    except OSError as exc:
        raise CliError(f"cannot write {args.out}.*: {exc.strerror}") from None
    print(f"wrote {key_path} (private, keep it off the nodes) and {pub_path} "
          f"(install in the trust directory); keyid {os.path.basename(args.out)}", file=out)
    return 0


def _sign(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(_read(args.key), password=None)
    except ValueError as exc:
        raise CliError(f"{args.key}: not a PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CliError(f"{args.key}: not an Ed25519 key")
    try:
        payload = json.loads(_read(args.input))
        # Refuse to sign what every agent would refuse to accept.
        Contract.from_payload(payload)
    except ValueError as exc:
        raise CliError(f"{args.input}: {exc}") from None
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    keyid = args.keyid if args.keyid is not None else os.path.basename(args.key).removesuffix(".key")
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": _b64(body),
        "signatures": [{"keyid": keyid, "sig": _b64(key.sign(pae(PAYLOAD_TYPE, body)))}],
    }
    data = (json.dumps(envelope, indent=2) + "\n").encode()
    if len(data) > MAX_ENVELOPE_BYTES:
        raise CliError(f"bundle would be {len(data)} bytes; agents refuse over {MAX_ENVELOPE_BYTES}")
    try:
        write_atomic(args.out, data, mode=0o644)
    except OSError as exc:
        raise CliError(f"cannot write {args.out}: {exc.strerror}") from None
    print(f"signed serial {payload['serial']} for hall {payload['hall']} with keyid {keyid!r}: "
          f"{args.out}", file=out)
    return 0


def _verify(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        trust = load_trust_dir(args.trust_dir)
    except TrustDirError as exc:
        raise CliError(str(exc)) from None
    for problem in trust.problems:
        print(f"warning: {problem}", file=err)
    raw = _read(args.bundle)
    outcome: Accepted | Opened | Rejected
    if args.hall is not None:
        outcome = decide(None, raw, NodeScope(args.hall, args.node_class), trust.keys)
    else:
        outcome = open_bundle(raw, trust.keys)
    if isinstance(outcome, Rejected):
        print(f"REJECTED {outcome.reason}: {outcome.detail}", file=out)
        return 1
    c = outcome.contract
    print(f"OK serial {c.serial} hall {c.hall} class {c.node_class} keyid {outcome.keyid} "
          f"budget {c.drain.budget_s}s", file=out)
    return 0


def _show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    env = parse_envelope(_read(args.bundle))
    if isinstance(env, Rejected):
        raise CliError(f"{env.reason}: {env.detail}")
    keyids = [keyid or "(none)" for keyid, _ in env.signatures]
    try:
        payload = json.loads(env.payload)
    except (ValueError, RecursionError) as exc:
        raise CliError(f"payload is not JSON: {exc}") from None
    serial = payload.get("serial") if isinstance(payload, dict) else None
    print(f"payloadType: {env.payload_type}\nkeyids: {', '.join(keyids)}\nserial: {serial}\n"
          f"signature: NOT VERIFIED (use verify --trust-dir)\npayload:", file=out)
    print(json.dumps(payload, indent=2, sort_keys=True), file=out)
    return 0


def _read(path: str) -> bytes:
    try:
        return read_bounded(path, MAX_ENVELOPE_BYTES)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror}") from None




def _b64(data: bytes) -> str:
    return b64encode(data).decode("ascii")
