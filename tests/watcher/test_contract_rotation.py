"""Key rotation on a running watcher (issue 17 point 4): the trust directory is re-read when it
changes, a change re-judges the served bundle even behind its ETag, a removed key verifies nothing
new while the contract in force stays. The keeper's two halves are driven in turn on this thread."""
from __future__ import annotations

import http.server
import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from common.log import Logger
from tests.support.contract_bundles import BundleServer, Key, payload
from watcher import contract_keeper
from watcher.contract_keeper import ContractKeeper
from watcher.contract_store import trust_signature
from watcher.contract_verify import Accepted, Rejected

from .test_contract_keeper import config_for


class Served:
    """What the bundle server serves: one body under an ETag, 304 when the client already has it."""

    def __init__(self) -> None:
        self.body = b""
        self.etag = ""

    def set(self, body: bytes) -> None:
        self.body, self.etag = body, f'"v{len(self.body)}-{hash(body) & 0xFFFF:x}"'

    def reply(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        if handler.headers.get("If-None-Match") == self.etag:
            handler.send_response(304)
            handler.send_header("ETag", self.etag)
            handler.end_headers()
            return
        handler.send_response(200)
        handler.send_header("ETag", self.etag)
        handler.send_header("Content-Length", str(len(self.body)))
        handler.end_headers()
        handler.wfile.write(self.body)


@pytest.fixture
def rig(tmp_path: Path, bundle_server: Callable[..., BundleServer]):
    """(keeper, served, server, events, trust dir) with key A trusted and a loaded keeper."""
    a = Key("a")
    served = Served()
    srv = bundle_server(served.reply)
    events: list[tuple[str, dict]] = []
    keeper = ContractKeeper(config_for(tmp_path, a, srv.url), Logger("watcher", stream=io.StringIO()),
                            lambda type, **kw: events.append((type, kw.get("data") or {})))
    keeper.load()
    events.clear()
    return keeper, served, srv, events, tmp_path / "trust", a


def refresh(keeper: ContractKeeper) -> Accepted | Rejected | None:
    r = keeper.fetch_once()
    assert r is not None
    keeper.adopt(r)
    return r.outcome


def test_a_bundle_refused_for_an_unknown_key_is_accepted_once_the_key_is_trusted_despite_the_etag(rig):
    keeper, served, srv, events, trust, _a = rig
    b = Key("b")
    served.set(b.bundle(payload(6)))
    first = refresh(keeper)
    assert isinstance(first, Rejected) and first.reason == "unknown_key"
    assert refresh(keeper) is None                              # 304: judged once, not again
    assert srv.requests[-1].get("If-None-Match") == served.etag
    (trust / "b.pub").write_bytes(b.pem_public)                 # the operator adds key B
    accepted = refresh(keeper)
    assert "If-None-Match" not in srv.requests[-1]               # the ETag was dropped: judged again
    assert isinstance(accepted, Accepted) and accepted.keyid == "b"
    assert keeper.contract.serial == 6 and set(keeper.keys) == {"a", "b"}
    assert [t for t, _ in events] == ["contract.rejected", "contract.accepted"]
    assert refresh(keeper) is None and srv.requests[-1].get("If-None-Match") == served.etag


def test_a_removed_key_verifies_nothing_new_and_the_contract_in_force_stays(rig):
    keeper, served, _srv, events, trust, a = rig
    b = Key("b")
    (trust / "b.pub").write_bytes(b.pem_public)
    served.set(b.bundle(payload(6)))
    assert isinstance(refresh(keeper), Accepted)
    os.unlink(trust / "a.pub")                                  # the operator retires key A
    served.set(a.bundle(payload(7)))
    refused = refresh(keeper)
    assert isinstance(refused, Rejected) and refused.reason == "unknown_key"
    assert keeper.contract.serial == 6 and set(keeper.keys) == {"b"}
    assert events[-1] == ("contract.rejected", {"source": "url", "reason": "unknown_key",
                                                "detail": refused.detail[:300]})


def test_the_contract_in_force_stays_when_its_own_key_is_removed(rig):
    """Removing the key that signed the current bundle refuses the same bundle when served again,
    but never takes the node off it: it was verified when it was accepted."""
    keeper, served, _srv, _events, trust, a = rig
    served.set(a.bundle(payload(6)))
    assert isinstance(refresh(keeper), Accepted)
    os.unlink(trust / "a.pub")
    refused = refresh(keeper)
    assert isinstance(refused, Rejected) and refused.reason == "unknown_key"
    assert keeper.contract.serial == 6 and keeper.keys == {}


def test_an_unchanged_trust_directory_is_not_read_again(rig, monkeypatch):
    keeper, served, srv, _events, _trust, a = rig
    reads: list[str] = []
    real = contract_keeper.reload_trust_dir
    monkeypatch.setattr(contract_keeper, "reload_trust_dir", lambda p: reads.append(p) or real(p))
    served.set(a.bundle(payload(6)))
    for _ in range(3):
        refresh(keeper)
    assert reads == [] and srv.requests[-1].get("If-None-Match") == served.etag


def test_a_key_file_rewritten_in_place_is_read_again(rig):
    keeper, served, _srv, _events, trust, _a = rig
    c = Key("a")                                                # a new key under the old name
    served.set(c.bundle(payload(6)))
    assert isinstance(refresh(keeper), Rejected)
    before = trust_signature(str(trust))
    with open(trust / "a.pub", "r+b") as f:                     # same inode, same size
        f.write(c.pem_public)
    assert trust_signature(str(trust)) != before
    assert isinstance(refresh(keeper), Accepted)


def test_a_trust_directory_made_world_writable_trusts_nothing_and_keeps_the_contract(rig):
    """At start such a directory stops the watcher; at run time it must not: no key is trusted,
    counted and reported, and the node keeps the contract it has."""
    keeper, served, _srv, events, trust, a = rig
    served.set(a.bundle(payload(6)))
    assert isinstance(refresh(keeper), Accepted)
    os.chmod(trust, 0o777)
    served.set(a.bundle(payload(7)))
    refused = refresh(keeper)
    assert isinstance(refused, Rejected) and refused.reason == "unknown_key"
    assert keeper.keys == {} and keeper.contract.serial == 6
    assert keeper.counters["trust_problem"] == 1
    assert ("contract.rejected", "trust_problem") in [(t, d.get("reason")) for t, d in events]
    os.chmod(trust, 0o700)                                      # fixed: trusted again, without a restart
    accepted = refresh(keeper)
    assert isinstance(accepted, Accepted) and keeper.contract.serial == 7


def test_a_vanished_trust_directory_trusts_nothing(rig):
    keeper, served, _srv, _events, trust, a = rig
    for name in os.listdir(trust):
        os.unlink(trust / name)
    os.rmdir(trust)
    served.set(a.bundle(payload(6)))
    refused = refresh(keeper)
    assert isinstance(refused, Rejected) and keeper.keys == {} and keeper.counters["trust_problem"] == 1
