"""agentctl.contract_cli: keygen, sign, verify, show through main(argv)."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from agentctl.contract_cli import main
from tests.support.contract_bundles import payload


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def signed(tmp_path: Path) -> dict[str, Path]:
    """keygen + sign done through the CLI: key pair in keys/, bundle.json beside it."""
    keys = tmp_path / "keys"
    keys.mkdir()
    (tmp_path / "payload.json").write_text(json.dumps(payload(12)))
    assert run("keygen", "--out", str(keys / "ops-2026"))[0] == 0
    code, out, _ = run("sign", "--key", str(keys / "ops-2026.key"), "--in", str(tmp_path / "payload.json"),
                       "--out", str(tmp_path / "bundle.json"))
    assert code == 0 and "serial 12" in out
    return {"keys": keys, "bundle": tmp_path / "bundle.json", "dir": tmp_path}


def test_keygen_modes_and_no_overwrite(signed: dict[str, Path]) -> None:
    keys = signed["keys"]
    assert os.stat(keys / "ops-2026.key").st_mode & 0o777 == 0o600
    assert os.stat(keys / "ops-2026.pub").st_mode & 0o777 == 0o644
    assert (keys / "ops-2026.pub").read_text().startswith("-----BEGIN PUBLIC KEY-----")
    before = (keys / "ops-2026.key").read_bytes()
    code, _, err = run("keygen", "--out", str(keys / "ops-2026"))
    assert code == 1 and "refusing to overwrite" in err
    assert (keys / "ops-2026.key").read_bytes() == before


def test_round_trip_verifies(signed: dict[str, Path]) -> None:
    code, out, _ = run("verify", "--trust-dir", str(signed["keys"]), str(signed["bundle"]))
    assert code == 0 and out.startswith("OK serial 12 hall fra1 class gpu keyid ops-2026")
    code, out, _ = run("verify", "--trust-dir", str(signed["keys"]), "--hall", "fra1", "--node-class", "gpu",
                       str(signed["bundle"]))
    assert code == 0


def test_verify_reports_scope_and_key_problems(signed: dict[str, Path], tmp_path: Path) -> None:
    code, out, _ = run("verify", "--trust-dir", str(signed["keys"]), "--hall", "ams1", str(signed["bundle"]))
    assert code == 1 and out.startswith("REJECTED wrong_scope:")
    other = tmp_path / "other-trust"
    other.mkdir()
    assert run("keygen", "--out", str(other / "someone"))[0] == 0
    code, out, _ = run("verify", "--trust-dir", str(other), str(signed["bundle"]))
    assert code == 1 and out.startswith("REJECTED unknown_key:")


def test_verify_refuses_a_tampered_bundle(signed: dict[str, Path]) -> None:
    env = json.loads(signed["bundle"].read_text())
    sig = env["signatures"][0]["sig"]
    # Its first character replaced by a different one: always a changed signature (a fixed "A" left
    # it as it was whenever a fresh key's signature began with "A", 1 run in 64).
    env["signatures"][0]["sig"] = ("B" if sig[0] == "A" else "A") + sig[1:]
    signed["bundle"].write_text(json.dumps(env))
    code, out, _ = run("verify", "--trust-dir", str(signed["keys"]), str(signed["bundle"]))
    assert code == 1 and out.startswith("REJECTED bad_signature:")


def test_show_prints_payload_keyid_serial(signed: dict[str, Path]) -> None:
    code, out, _ = run("show", str(signed["bundle"]))
    assert code == 0
    assert "keyids: ops-2026" in out and "serial: 12" in out and "NOT VERIFIED" in out
    assert '"budget_s": 100' in out


def test_sign_refuses_an_invalid_payload(signed: dict[str, Path]) -> None:
    bad = signed["dir"] / "bad.json"
    bad.write_text(json.dumps(payload(13, drain={"budget_s": 10, "checkpoint_s": 10, "evict_s": 10,
                                                 "margin_s": 0})))
    code, _, err = run("sign", "--key", str(signed["keys"] / "ops-2026.key"), "--in", str(bad),
                       "--out", str(signed["dir"] / "b2.json"))
    assert code == 1 and "contract field 'drain'" in err
    assert not (signed["dir"] / "b2.json").exists()


def test_sign_with_explicit_keyid(signed: dict[str, Path]) -> None:
    out_path = signed["dir"] / "b3.json"
    code, _, _ = run("sign", "--key", str(signed["keys"] / "ops-2026.key"), "--in",
                     str(signed["dir"] / "payload.json"), "--out", str(out_path), "--keyid", "hall-key")
    assert code == 0 and json.loads(out_path.read_text())["signatures"][0]["keyid"] == "hall-key"
    # The keyid is only a hint: the trust file is named ops-2026, and it still verifies.
    assert run("verify", "--trust-dir", str(signed["keys"]), str(out_path))[0] == 0


def test_usage_errors_exit_2_and_missing_files_exit_1(tmp_path: Path) -> None:
    assert run("frobnicate")[0] == 2
    assert run("verify", "bundle.json")[0] == 2  # --trust-dir is required
    code, _, err = run("show", str(tmp_path / "absent.json"))
    assert code == 1 and "No such file" in err
    code, _, err = run("verify", "--trust-dir", str(tmp_path / "nope"), str(tmp_path / "absent.json"))
    assert code == 1 and "trust directory" in err
