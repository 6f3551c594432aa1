"""The watcher process checks contract signatures in a child: the Ed25519 library never loads in it.

watcher/__main__.py passes ``ed25519_check.in_child()`` to the contract code; every
other caller gets the in-process check. Only a real watcher process shows which one
it was given, so this one verifies a signed launch bundle and its memory map is read.
"""
from __future__ import annotations

import os

from tests.support.contract_bundles import Key, payload
from tests.support.wait import wait_for
from tests.watcher.rig import WatcherRig


def mapped_cryptography(pid: int | str) -> list[str]:
    with open(f"/proc/{pid}/maps") as f:
        return [line.split()[-1] for line in f if "cryptography" in line]


def test_the_watcher_verifies_its_contract_without_loading_cryptography(tmp_path):
    key = Key("ops-2026")
    trust = tmp_path / "trust"
    trust.mkdir(mode=0o700)
    (trust / "ops-2026.pub").write_bytes(key.pem_public)
    launch = tmp_path / "launch.json"
    launch.write_bytes(key.bundle(payload(3, hall="h1", node_class="default")))
    contract = {"trust_dir": str(trust), "launch_path": str(launch)}
    with WatcherRig(str(tmp_path / "w"), extra={"contract": contract}) as rig:
        accepted = wait_for(lambda: rig.spool.of_type("contract.accepted"), 15, "contract.accepted")
        assert accepted[0]["data"] == {"serial": 3, "source": "launch"}
        assert rig.proc is not None and rig.alive()
        assert mapped_cryptography(rig.proc.pid) == []
    # The check can see the library where it is loaded: this test process imported it.
    assert mapped_cryptography(os.getpid())
