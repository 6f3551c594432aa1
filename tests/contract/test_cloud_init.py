"""deploy/cloud-init/user-data.yaml: the example is cloud-config and its bundle verifies."""
from __future__ import annotations

import os
import re
from pathlib import Path

from watcher.contract_store import parse_public_key
from watcher.contract_verify import Accepted, NodeScope, decide

USER_DATA = Path(__file__).resolve().parents[2] / "deploy" / "cloud-init" / "user-data.yaml"


def _write_files() -> dict[str, str]:
    """path -> content of each write_files entry, read without a YAML library.

    Enough for this file's shape (``- path:`` then ``content: |`` blocks); the
    real YAML parse (PyYAML, as cloud-init does) is the next test, and checks this one.
    """
    files: dict[str, str] = {}
    path = None
    lines = USER_DATA.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*- path: (\S+)$", lines[i])
        if m:
            path = m.group(1)
        if re.match(r"^\s+content: \|$", lines[i]) and path:
            indent = len(lines[i]) - len(lines[i].lstrip()) + 2
            block = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" " * indent)):
                block.append(lines[i][indent:])
                i += 1
            files[path] = "\n".join(block).strip() + "\n"
            continue
        i += 1
    return files


def test_is_cloud_config() -> None:
    assert USER_DATA.read_text(encoding="utf-8").startswith("#cloud-config\n")


def test_launch_subset_verifies_with_the_shipped_trust_key() -> None:
    files = _write_files()
    trust = {os.path.basename(p).removesuffix(".pub"): parse_public_key(c.encode())
             for p, c in files.items() if p.startswith("/etc/sco-agent/trust/") and p.endswith(".pub")}
    assert list(trust) == ["sco-example-2026"]
    out = decide(None, files["/etc/sco-agent/contract-launch.json"].encode(),
                 NodeScope("example-hall-1", "any-class"), trust, source="launch")
    assert isinstance(out, Accepted), out
    assert out.contract.serial == 41 and out.contract.drain.budget_s == 100


def test_parses_as_yaml_with_expected_modes() -> None:
    import yaml  # the test extra's PyYAML, what cloud-init parses user-data with; not an agent dependency
    doc = yaml.safe_load(USER_DATA.read_text(encoding="utf-8"))
    entries = {f["path"]: f for f in doc["write_files"]}
    assert set(entries) == set(_write_files())
    for entry in entries.values():
        assert entry["owner"] == "root:root" and entry["permissions"] == "0644"
        assert entry["content"] == _write_files()[entry["path"]]
