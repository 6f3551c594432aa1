"""Test-side TLS certificates and NATS decentralized auth (operator, account, user JWTs, .creds).

Built with ``cryptography`` only, the way ``nsc`` would: an nkey is an Ed25519
key in base32 with a one- or two-byte prefix and a CRC-16; a NATS JWT is
``header.claims.signature`` with alg ``ed25519-nkey``, signed by its issuer.
"""
from __future__ import annotations

import base64
import json
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.support import pki
from watcher.nats_creds import PREFIX_SEED, crc16

PREFIX = {"operator": 14 << 3, "account": 0, "user": 20 << 3}


def _b32(raw: bytes) -> str:
    return base64.b32encode(raw + crc16(raw).to_bytes(2, "little")).decode().rstrip("=")


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass
class NKey:
    kind: str
    private: Ed25519PrivateKey

    @classmethod
    def new(cls, kind: str) -> NKey:
        return cls(kind, Ed25519PrivateKey.generate())

    @property
    def public(self) -> str:
        raw = self.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return _b32(bytes([PREFIX[self.kind]]) + raw)

    @property
    def seed(self) -> str:
        raw = self.private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                         serialization.NoEncryption())
        kind = PREFIX[self.kind]
        return _b32(bytes([PREFIX_SEED | kind >> 5, (kind & 31) << 3]) + raw)


def jwt(issuer: NKey, subject: NKey, name: str, nats: dict[str, Any]) -> str:
    claims = {"jti": secrets.token_hex(16).upper(), "iat": int(time.time()), "iss": issuer.public,
              "name": name, "sub": subject.public, "nats": {**nats, "type": subject.kind, "version": 2}}
    head = _b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64url(json.dumps(claims).encode())
    return f"{head}.{body}.{_b64url(issuer.private.sign(f'{head}.{body}'.encode()))}"


def creds_text(user_jwt: str, seed: str) -> str:
    return (f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n")


def operator_setup(directory: str) -> tuple[str, str]:
    """Write a nats-server config (operator mode, memory resolver) and a user .creds; their paths."""
    operator, account, user = NKey.new("operator"), NKey.new("account"), NKey.new("user")
    unlimited = {"subs": -1, "conn": -1, "leaf": -1, "imports": -1, "exports": -1, "data": -1,
                 "payload": -1, "wildcards": True}
    op_jwt = os.path.join(directory, "operator.jwt")
    with open(op_jwt, "w") as f:
        f.write(jwt(operator, operator, "op", {}))
    account_jwt = jwt(operator, account, "hall", {"limits": unlimited})
    conf = os.path.join(directory, "operator.conf")
    with open(conf, "w") as f:
        f.write(f'operator: "{op_jwt}"\nresolver: MEMORY\nresolver_preload: {{\n  {account.public}: "{account_jwt}"\n}}\n')
    creds = os.path.join(directory, "user.creds")
    with open(creds, "w") as f:
        f.write(creds_text(jwt(account, user, "watcher", {"pub": {}, "sub": {}, "subs": -1, "data": -1,
                                                          "payload": -1}), user.seed))
    os.chmod(creds, 0o600)
    return conf, creds


def tls_setup(directory: str, rfc5280: bool = True) -> dict[str, str]:
    """A CA, a server and a client certificate (for 127.0.0.1) and a mutual-TLS nats-server config.
    ``rfc5280=False``: the server's certificate lacks what RFC 5280 requires (tests/support/pki.py)."""
    paths = {}

    def write(name: str, data: bytes) -> str:
        paths[name] = os.path.join(directory, name)
        with open(paths[name], "wb") as f:
            f.write(data)
        return paths[name]

    ca = pki.ca("test-ca", ec.generate_private_key(ec.SECP256R1()))
    write("ca.pem", ca.cert.public_bytes(serialization.Encoding.PEM))
    for role, usage in (("server", pki.SERVER), ("client", pki.CLIENT)):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = pki.leaf(pki.name(role), key, ca, (usage,), pki.LOOPBACK_SANS, rfc5280=rfc5280 or role == "client")
        write(f"{role}.pem", cert.public_bytes(serialization.Encoding.PEM))
        write(f"{role}-key.pem", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
    write("tls.conf", (f'tls {{\n  cert_file: "{paths["server.pem"]}"\n  key_file: "{paths["server-key.pem"]}"\n'
                       f'  ca_file: "{paths["ca.pem"]}"\n  verify: true\n}}\n').encode())
    return paths
