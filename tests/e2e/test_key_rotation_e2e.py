"""Rotating the contract signing key on a running agent (issue 17 point 4), with the watcher process
and a bundle server that answers 304 behind its ETag: key B added -> a bundle signed by B is accepted
with no restart; key A removed -> a bundle signed by A is refused and B's stays in force."""
from __future__ import annotations

import os

import ujson

from tests.e2e.test_contract_e2e import BundleServer
from tests.support.stack import Stack
from tests.support.wait import wait_for

DRAIN = {"budget_s": 60, "checkpoint_s": 7, "evict_s": 30, "margin_s": 5}


def test_add_key_b_then_remove_key_a_without_a_restart(tmp_path):
    bundles = BundleServer()
    try:
        with Stack(str(tmp_path), contract=DRAIN,
                   settings={"contract": {"url": bundles.url, "refresh_s": 1.0}}) as s:
            watcher_pid = s.agent.pid("watcher")
            status_path = os.path.join(s.agent.run_dir, "contract.json")
            lkg_path = os.path.join(s.agent.state_dir, "contract-lkg.json")

            def serial_in_force() -> int:
                with open(status_path, "rb") as f:
                    return ujson.loads(f.read())["contract"]["serial"]

            def rejected(reason: str, after: int) -> list[dict]:
                return [e for e in s.events_of("contract.rejected")[after:] if e["data"].get("reason") == reason]

            def serve(serial: int, key: str, trust_new_key: bool = True) -> None:
                out = s.sign_bundle(DRAIN, serial, str(tmp_path / f"serial{serial}.json"), key=key,
                                    trust_new_key=trust_new_key)
                with open(out, "rb") as f:
                    bundles.body = f.read()

            # Serial 2 signed by A (the hall key cloud-init placed): the normal case.
            serve(2, "hall")
            wait_for(lambda: serial_in_force() == 2, 30, "serial 2 (key A) in force")

            # Serial 3 signed by a key B the node does not trust yet: refused, then 304s behind its ETag.
            seen = len(s.events_of("contract.rejected"))
            serve(3, "b", trust_new_key=False)
            wait_for(lambda: rejected("unknown_key", seen), 30, "serial 3 refused: unknown key")
            assert serial_in_force() == 2

            # The operator adds B to the trust directory: serial 3 is judged again and accepted.
            s.trust_key("b")
            wait_for(lambda: serial_in_force() == 3, 30, "serial 3 (key B) in force after adding B")
            # In force is what the watcher announced; its event reaches the spool's sink a moment later.
            accepted = wait_for(lambda: [e for e in s.events_of("contract.accepted") if e["data"].get("serial") == 3],
                                15, "contract.accepted of serial 3")
            assert accepted[0]["data"]["keyid"] == "b"

            # The operator retires A; serial 4, signed by A, is refused; B's serial 3 stays in force.
            os.unlink(os.path.join(tmp_path, "trust", "hall.pub"))
            seen = len(s.events_of("contract.rejected"))
            serve(4, "hall")
            wait_for(lambda: rejected("unknown_key", seen), 30, "serial 4 (key A) refused after removing A")
            assert serial_in_force() == 3
            with open(lkg_path, "rb") as f:
                lkg_payload = ujson.loads(f.read())
            assert lkg_payload["signatures"][0]["keyid"] == "b"   # the LKG is B's bundle, for the next start

            assert s.agent.pid("watcher") == watcher_pid   # no restart at any point
            assert "contract.trust_reloaded" in s.agent.log("watcher")
    finally:
        bundles.close()
