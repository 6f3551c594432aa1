"""Contract files on the node: trust directory, launch subset, last-known-good bundle.

Thin adapters around the pure choices in ``watcher.contract_verify``:

- the trust directory holds one public key per ``<keyid>.pub`` file (raw 32
  bytes, or PEM SubjectPublicKeyInfo as ``sco-agentctl contract keygen``
  writes); the file stem is the keyid;
- the launch subset is the signed envelope cloud-init wrote at launch;
- the LKG is the last accepted bundle, kept as the signed envelope itself so it
  is verified again at every load (a file edited on disk is not trusted).

Nothing here raises on bad content: problems come back as values for the
watcher to count and report. Only ``load_trust_dir`` raises, for a trust
directory that cannot be used at all. ``load_startup`` turns a missing (or
unreadable) one into "no trusted keys" -- the node starts on BUILTIN, loudly --
but lets ``TrustDirUnsafe`` through: a directory anyone can write to is a
configuration error, and the watcher refuses to start (exit 2) until it is fixed.
"""
from __future__ import annotations

import errno
import os
import stat
from base64 import b64decode
from dataclasses import dataclass

from common.fsutil import read_bounded, write_atomic
from watcher.contract_verify import (
    MAX_ENVELOPE_BYTES,
    NodeScope,
    Rejected,
    Startup,
    choose_startup,
)
from watcher.ed25519_check import SignatureCheck, check_here

MAX_TRUSTED_KEYS = 16  # rotation needs two or three; a full directory is a mistake
_MAX_KEY_FILE = 4096

# DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): the raw key is the 32 bytes after it.
_ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")


class TrustDirError(ValueError):
    """The trust directory cannot be used at all (missing, not a directory, writable by anyone)."""


class TrustDirUnsafe(TrustDirError):
    """The trust directory (or its parent) is writable by anyone: the agent must not start on it."""


@dataclass(frozen=True, slots=True)
class TrustLoad:
    """Keys that loaded (keyid -> raw 32-byte Ed25519 public key) and the files that did not."""

    keys: dict[str, bytes]
    problems: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StartupLoad:
    """``Startup`` plus what went wrong reading the trust directory."""

    startup: Startup
    trust: TrustLoad


def load_trust_dir(path: str) -> TrustLoad:
    """Read every ``*.pub`` in ``path``; a world-writable directory is refused outright."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise TrustDirError(f"trust directory {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise TrustDirError(f"trust directory {path}: not a directory")
    if st.st_mode & stat.S_IWOTH:
        # Anyone could drop a key in and sign their own drain budget (a sticky bit does not help:
        # it only protects files from deletion by others, not new files from being added).
        raise TrustDirUnsafe(
            f"trust directory {path} is world-writable (mode {stat.S_IMODE(st.st_mode):o}); "
            f"refusing every key in it: chmod o-w {path}"
        )
    parent = os.path.dirname(os.path.abspath(path))
    pst = os.stat(parent)
    if pst.st_mode & stat.S_IWOTH and not pst.st_mode & stat.S_ISVTX:
        # ... or rename the whole directory away and put their own in its place.
        raise TrustDirUnsafe(
            f"trust directory {path}: its parent {parent} is world-writable without the sticky bit "
            f"(mode {stat.S_IMODE(pst.st_mode):o}); refusing it: chmod o-w {parent}"
        )
    keys: dict[str, bytes] = {}
    problems: list[str] = []
    for name in sorted(os.listdir(path)):
        if not name.endswith(".pub"):
            continue
        keyid, file_path = name.removesuffix(".pub"), os.path.join(path, name)
        if len(keys) >= MAX_TRUSTED_KEYS:
            problems.append(f"{file_path}: ignored, more than {MAX_TRUSTED_KEYS} keys")
            continue
        try:
            if os.stat(file_path).st_mode & stat.S_IWOTH:
                raise ValueError("world-writable, not trusted")
            keys[keyid] = parse_public_key(read_bounded(file_path, _MAX_KEY_FILE))
        except (OSError, ValueError) as exc:
            problems.append(f"{file_path}: {exc}")
    return TrustLoad(keys, tuple(problems))


TrustSignature = tuple[tuple[str, int, int, int, int, int], ...]


def trust_signature(path: str) -> TrustSignature | None:
    """What the trust directory holds, cheaply: (name, inode, size, mode, mtime, ctime) of each
    ``*.pub`` and of the directory itself. Adding, removing, renaming, rewriting or re-moding a
    key changes it (an editor's rename-over changes the inode, an in-place write the mtime, a
    chmod the mode and ctime), so the watcher re-reads the keys only when this differs. None when
    the directory cannot be listed."""
    try:
        entries = [(".", os.stat(path))]
        for name in sorted(os.listdir(path)):
            if name.endswith(".pub"):
                try:
                    entries.append((name, os.stat(os.path.join(path, name))))
                except OSError:
                    continue   # removed between the listing and the stat: the next call sees it gone
    except OSError:
        return None
    return tuple((name, st.st_ino, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns) for name, st in entries)


def reload_trust_dir(path: str) -> TrustLoad:
    """``load_trust_dir`` for a running watcher: a directory that became unusable, even unsafe,
    means no trusted keys (every new bundle refused, the contract in force kept), never a crash."""
    try:
        return load_trust_dir(path)
    except TrustDirError as exc:
        return TrustLoad({}, (str(exc),))


def parse_public_key(data: bytes) -> bytes:
    """Raw 32-byte Ed25519 public key from raw bytes or a PEM public key; ValueError otherwise."""
    if len(data) == 32:
        return data
    text = data.decode("ascii", errors="replace").strip()
    head, tail = "-----BEGIN PUBLIC KEY-----", "-----END PUBLIC KEY-----"
    if not (text.startswith(head) and text.endswith(tail)):
        raise ValueError("not a raw 32-byte key or a PEM public key")
    try:
        der = b64decode("".join(text[len(head): -len(tail)].split()), validate=True)
    except ValueError:
        raise ValueError("PEM body is not base64") from None
    if len(der) != 44 or not der.startswith(_ED25519_SPKI_PREFIX):
        raise ValueError("PEM key is not an Ed25519 public key")
    return der[len(_ED25519_SPKI_PREFIX):]


def read_envelope(path: str) -> bytes | Rejected | None:
    """A bundle file's bytes; None if it does not exist; Rejected if it cannot be used."""
    try:
        return read_bounded(path, MAX_ENVELOPE_BYTES)
    except FileNotFoundError:
        return None
    except ValueError:
        return Rejected("too_large", f"{path}: larger than {MAX_ENVELOPE_BYTES} bytes")
    except OSError as exc:
        code = exc.errno  # None only for an OSError raised without one
        name = errno.errorcode.get(code, str(code)) if code is not None else str(code)
        return Rejected("unreadable", f"{path}: {name}")


def save_lkg(path: str, envelope: bytes) -> None:
    """Persist an accepted bundle atomically: after a crash the old or the new one, never a mix."""
    write_atomic(path, envelope, mode=0o600)


def load_startup(trust_dir: str, launch_path: str, lkg_path: str, scope: NodeScope,
                 check: SignatureCheck = check_here) -> StartupLoad:
    """Everything the watcher needs at start, without any network; TrustDirUnsafe passes through."""
    try:
        trust = load_trust_dir(trust_dir)
    except TrustDirUnsafe:
        raise
    except TrustDirError as exc:
        trust = TrustLoad({}, (str(exc),))
    startup = choose_startup(read_envelope(launch_path), read_envelope(lkg_path), scope, trust.keys, check)
    return StartupLoad(startup, trust)
