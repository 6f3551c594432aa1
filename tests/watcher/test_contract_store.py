"""watcher.contract_store: trust directory, LKG persistence, startup precedence (no network)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.contract import BUILTIN
from tests.support.contract_bundles import SCOPE, Key, payload
from watcher.contract_store import (
    TrustDirError,
    TrustDirUnsafe,
    load_startup,
    load_trust_dir,
    parse_public_key,
    read_envelope,
    save_lkg,
)
from watcher.contract_verify import MAX_ENVELOPE_BYTES, Accepted, Rejected


@pytest.fixture
def node(tmp_path: Path, key: Key) -> dict[str, Path]:
    """A node's contract files: trust dir holding ``key`` (PEM), launch and LKG paths (absent)."""
    trust = tmp_path / "trust"
    trust.mkdir(mode=0o755)
    (trust / f"{key.keyid}.pub").write_bytes(key.pem_public)
    return {"trust": trust, "launch": tmp_path / "contract-launch.json", "lkg": tmp_path / "lkg.json"}


def _start(node: dict[str, Path]):
    return load_startup(str(node["trust"]), str(node["launch"]), str(node["lkg"]), SCOPE).startup


def test_trust_dir_reads_pem_and_raw_keys(tmp_path: Path) -> None:
    a, b = Key("a"), Key("b")
    (tmp_path / "a.pub").write_bytes(a.pem_public)
    (tmp_path / "b.pub").write_bytes(b.raw_public)
    (tmp_path / "a.key").write_bytes(b"private keys are not trust")
    (tmp_path / "README").write_text("ignored")
    loaded = load_trust_dir(str(tmp_path))
    assert loaded.keys == {"a": a.raw_public, "b": b.raw_public} and loaded.problems == ()


def test_bad_key_file_is_skipped_and_reported(tmp_path: Path, key: Key) -> None:
    (tmp_path / "good.pub").write_bytes(key.pem_public)
    (tmp_path / "junk.pub").write_bytes(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    (tmp_path / "short.pub").write_bytes(b"\x01" * 31)
    loaded = load_trust_dir(str(tmp_path))
    assert list(loaded.keys) == ["good"]
    assert len(loaded.problems) == 2 and "junk.pub: PEM key is not an Ed25519" in loaded.problems[0]


def test_world_writable_trust_dir_is_refused(tmp_path: Path, key: Key) -> None:
    (tmp_path / "k.pub").write_bytes(key.pem_public)
    os.chmod(tmp_path, 0o777)
    with pytest.raises(TrustDirError, match=r"world-writable \(mode 777\).*chmod o-w"):
        load_trust_dir(str(tmp_path))


def test_world_writable_key_file_is_not_trusted(tmp_path: Path, key: Key) -> None:
    (tmp_path / "k.pub").write_bytes(key.pem_public)
    os.chmod(tmp_path / "k.pub", 0o666)
    loaded = load_trust_dir(str(tmp_path))
    assert loaded.keys == {} and "world-writable" in loaded.problems[0]


def test_missing_trust_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TrustDirError, match="No such file"):
        load_trust_dir(str(tmp_path / "nope"))


def test_pem_parser_rejects_non_ed25519() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(ValueError, match="not an Ed25519"):
        parse_public_key(pem)


def test_no_contract_anywhere_starts_on_builtin(node: dict[str, Path]) -> None:
    s = _start(node)
    assert s.contract is BUILTIN and s.contract.source == "builtin"
    assert s.envelope is None and s.launch is None and s.lkg is None


def test_launch_subset_used_when_no_lkg(node: dict[str, Path], key: Key) -> None:
    node["launch"].write_bytes(key.bundle(payload(3)))
    s = _start(node)
    assert s.contract.serial == 3 and s.contract.source == "launch" and isinstance(s.launch, Accepted)


def test_lkg_persisted_atomically_and_reloaded_without_network(node: dict[str, Path], key: Key) -> None:
    bundle = key.bundle(payload(8))
    save_lkg(str(node["lkg"]), bundle)
    assert node["lkg"].read_bytes() == bundle
    assert os.stat(node["lkg"]).st_mode & 0o777 == 0o600
    assert [p.name for p in node["lkg"].parent.iterdir() if ".tmp." in p.name] == []
    s = _start(node)
    assert s.contract.serial == 8 and s.contract.source == "bundle" and s.envelope == bundle


def test_lkg_replaced_whole(node: dict[str, Path], key: Key) -> None:
    save_lkg(str(node["lkg"]), key.bundle(payload(8)))
    save_lkg(str(node["lkg"]), key.bundle(payload(9)))
    assert _start(node).contract.serial == 9


def test_lkg_wins_over_launch_at_equal_or_higher_serial(node: dict[str, Path], key: Key) -> None:
    node["launch"].write_bytes(key.bundle(payload(5, pdb_blocked="report")))
    for serial in (5, 6):
        save_lkg(str(node["lkg"]), key.bundle(payload(serial)))
        s = _start(node)
        assert s.contract.serial == serial and s.contract.source == "bundle"


def test_launch_wins_over_an_older_lkg(node: dict[str, Path], key: Key) -> None:
    """A re-imaged node with newer user-data but an old state directory."""
    node["launch"].write_bytes(key.bundle(payload(7)))
    save_lkg(str(node["lkg"]), key.bundle(payload(6)))
    s = _start(node)
    assert s.contract.serial == 7 and s.contract.source == "launch"
    assert isinstance(s.lkg, Rejected) and s.lkg.reason == "lower_serial"


def test_tampered_lkg_is_reverified_and_refused(node: dict[str, Path], key: Key) -> None:
    """The LKG is the signed envelope: an edit on disk does not verify, launch is used."""
    node["launch"].write_bytes(key.bundle(payload(3)))
    node["lkg"].write_bytes(key.bundle(payload(9)).replace(b'"sig": "', b'"sig": "AAAA'))
    s = _start(node)
    assert s.contract.serial == 3 and isinstance(s.lkg, Rejected)


def test_truncated_lkg_falls_back(node: dict[str, Path], key: Key) -> None:
    node["launch"].write_bytes(key.bundle(payload(3)))
    node["lkg"].write_bytes(key.bundle(payload(9))[:50])
    s = _start(node)
    assert s.contract.serial == 3 and s.lkg == Rejected("truncated", "input ends early (50 bytes)")


@pytest.mark.parametrize("mode", [0o777, 0o1777])
def test_world_writable_trust_dir_refuses_to_start(node: dict[str, Path], key: Key, mode: int) -> None:
    """A trust dir anyone can add a key to is a configuration error, sticky bit or not: the
    watcher must not start on it (watcher/__main__.py exits 2, tests/hostile/test_permissions.py)."""
    node["launch"].write_bytes(key.bundle(payload(3)))
    os.chmod(node["trust"], mode)
    with pytest.raises(TrustDirUnsafe, match=r"world-writable.*chmod o-w"):
        load_startup(str(node["trust"]), str(node["launch"]), str(node["lkg"]), SCOPE)


def test_trust_dir_under_a_world_writable_parent_is_refused(tmp_path: Path, key: Key) -> None:
    """Without the sticky bit anyone could rename the directory away and put their own there."""
    parent = tmp_path / "open"
    parent.mkdir()
    (parent / "trust").mkdir(mode=0o755)
    os.chmod(parent, 0o777)
    with pytest.raises(TrustDirUnsafe, match="parent"):
        load_trust_dir(str(parent / "trust"))
    os.chmod(parent, 0o1777)   # like /tmp: others cannot rename what is not theirs
    assert load_trust_dir(str(parent / "trust")).keys == {}


def test_missing_trust_dir_starts_on_builtin_loudly(tmp_path: Path, key: Key) -> None:
    """No trust directory at all is 'no keys': the node runs on BUILTIN and says why."""
    launch = tmp_path / "contract-launch.json"
    launch.write_bytes(key.bundle(payload(3)))
    loaded = load_startup(str(tmp_path / "absent"), str(launch), str(tmp_path / "lkg.json"), SCOPE)
    assert loaded.startup.contract is BUILTIN
    assert "No such file" in loaded.trust.problems[0]
    assert isinstance(loaded.startup.launch, Rejected) and loaded.startup.launch.reason == "unknown_key"


def test_read_envelope_outcomes(tmp_path: Path) -> None:
    assert read_envelope(str(tmp_path / "absent")) is None
    big = tmp_path / "big"
    big.write_bytes(b" " * (MAX_ENVELOPE_BYTES + 1))
    out = read_envelope(str(big))
    assert isinstance(out, Rejected) and out.reason == "too_large"
    out = read_envelope(str(tmp_path))  # a directory: EISDIR
    assert isinstance(out, Rejected) and out.reason == "unreadable"
