"""NATS user credentials (a ``.creds`` file: user JWT + nkey seed), signed with ``cryptography``.

nats-py's own ``user_credentials`` option needs the ``nkeys`` package (and
PyNaCl under it); the agent already carries ``cryptography`` for contract
signatures, and an nkey is just an Ed25519 seed in base32 with a prefix and a
CRC-16. So we decode the seed here and hand nats-py the two documented
callbacks, ``user_jwt_cb`` and ``signature_cb``. The file is read on every
connect, so rotated credentials are picked up at the next reconnect.
"""
from __future__ import annotations

import base64
from collections.abc import Callable

MAX_CREDS_BYTES = 64 * 1024
PREFIX_SEED = 18 << 3     # 'S'
PREFIX_USER = 20 << 3     # 'U'


class CredsError(ValueError):
    """The credentials file is unusable; the message says why (never the secret)."""


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM, as nkeys checksums its keys."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def decode_user_seed(text: str) -> bytes:
    """The 32-byte Ed25519 seed of a user nkey seed (``SU...``)."""
    text = text.strip()
    try:
        raw = base64.b32decode(text + "=" * (-len(text) % 8))
    except (ValueError, TypeError):
        raise CredsError("nkey seed is not base32") from None
    if len(raw) != 36:
        raise CredsError("nkey seed has the wrong length")
    if crc16(raw[:-2]) != int.from_bytes(raw[-2:], "little"):
        raise CredsError("nkey seed checksum mismatch")
    kind = ((raw[0] & 7) << 5) | ((raw[1] & 248) >> 3)
    if raw[0] & 248 != PREFIX_SEED or kind != PREFIX_USER:
        raise CredsError("not a user nkey seed")
    return raw[2:34]


def read_creds(path: str) -> tuple[str, bytes]:
    """(user JWT, Ed25519 seed) from a ``.creds`` file."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CREDS_BYTES + 1)
    except OSError as e:
        raise CredsError(f"{path}: {e.strerror}") from None
    if len(data) > MAX_CREDS_BYTES:
        raise CredsError(f"{path}: larger than {MAX_CREDS_BYTES} bytes")
    jwt = seed = ""
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("-----BEGIN") and i + 1 < len(lines):
            # The block's content is the next non-empty line.
            content = next((x for x in lines[i + 1:] if x), "")
            if "JWT" in line:
                jwt = content
            elif "SEED" in line:
                seed = content
    if not jwt or jwt.count(".") != 2:
        raise CredsError(f"{path}: no user JWT block")
    if not seed:
        raise CredsError(f"{path}: no nkey seed block")
    return jwt, decode_user_seed(seed)


def callbacks(path: str) -> tuple[Callable[[], bytes], Callable[[str], bytes]]:
    """nats-py's ``user_jwt_cb`` and ``signature_cb`` for this file; validates it once now."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    read_creds(path)   # fail at start with a clear message, not at the first connect

    def user_jwt() -> bytes:
        return read_creds(path)[0].encode()

    def sign(nonce: str) -> bytes:
        key = Ed25519PrivateKey.from_private_bytes(read_creds(path)[1])
        return base64.b64encode(key.sign(nonce.encode()))

    return user_jwt, sign
