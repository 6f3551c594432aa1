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

    Enough for this file's shape (``- path:`` then ``content: |`` blocks); cloud-init's own
    parse and write_files rendering are tests/referees/test_cloud_init.py.
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
