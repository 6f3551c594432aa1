"""Ed25519 signature checks, in this process or in a short-lived child: the watcher passes one in.

The watcher verifies a contract at start and whenever the bundle source
returns a new one -- a few times a day. Loading the Ed25519 library
(``cryptography``) into the long-lived watcher would cost about 8 MiB of the
agent's 40 MiB for the whole life of the node; a child that loads it, checks,
prints one line and exits costs about 80 ms of CPU instead. So the watcher's
entry point hands ``in_child()`` to the contract code, and everything else
(the operator CLI, the tests) uses the default, ``check_here``.

Child protocol: one JSON object on stdin, ``{"message": b64, "candidates":
[[public b64, signature b64], ...]}``; one line on stdout, the index of the
first pair that verifies or -1. The child's input is the watcher's own
(already bounded) data; its output is parsed strictly.
"""
from __future__ import annotations

import subprocess
import sys
from base64 import b64decode, b64encode
from collections.abc import Callable

import ujson

# (message, [(public key, signature), ...]) -> index of the first pair that verifies, else None.
SignatureCheck = Callable[[bytes, list[tuple[bytes, bytes]]], int | None]
CHILD_TIMEOUT_S = 20.0


def check_here(message: bytes, candidates: list[tuple[bytes, bytes]]) -> int | None:
    """Index of the first (public key, signature) pair that verifies ``message``, else None."""
    if not candidates:
        return None
    # Imported here, not at the top: see the module docstring.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    for i, (public, sig) in enumerate(candidates):
        if len(sig) != 64:
            continue
        try:
            Ed25519PublicKey.from_public_bytes(public).verify(sig, message)
        except (InvalidSignature, ValueError):
            continue
        return i
    return None


def in_child(timeout_s: float = CHILD_TIMEOUT_S) -> SignatureCheck:
    """A SignatureCheck that runs in a child process, and here only if no child can answer."""

    def check(message: bytes, candidates: list[tuple[bytes, bytes]]) -> int | None:
        if not candidates:
            return None
        found = check_in_child(message, candidates, timeout_s)
        if found is not False:
            return found
        # The child could not run at all (no fork, a broken interpreter): a contract must still
        # be judged, so pay for the library here rather than refuse a good bundle.
        return check_here(message, candidates)

    return check


def check_in_child(message: bytes, candidates: list[tuple[bytes, bytes]], timeout_s: float) -> int | bool | None:
    """Index of the first verifying pair, None if none does, False if the child could not answer."""
    request = ujson.dumps({"message": b64encode(message).decode(),
                           "candidates": [[b64encode(p).decode(), b64encode(s).decode()] for p, s in candidates]})
    try:
        done = subprocess.run([sys.executable, "-m", "watcher.ed25519_check"], input=request.encode(),
                              capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    answer = done.stdout.strip()
    if done.returncode != 0 or not answer.lstrip(b"-").isdigit():
        return False
    index = int(answer)
    if index == -1:
        return None
    return index if 0 <= index < len(candidates) else False


def main() -> int:
    doc = ujson.loads(sys.stdin.buffer.read(1 << 20))
    message = b64decode(doc["message"])
    candidates = [(b64decode(p), b64decode(s)) for p, s in doc["candidates"]]
    found = check_here(message, candidates)
    sys.stdout.write(f"{-1 if found is None else found}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
