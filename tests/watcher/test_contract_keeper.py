"""watcher.contract_keeper: the refresh runs in a worker thread, but only the loop thread emits.

``emit`` writes to the watcher's zmq DEALER socket (common.runtime.SpoolLink), and a
zmq socket must never be used from two threads. The tests wire a real Watcher, whose
spool link records the thread of every emit, to a local bundle server.
"""
from __future__ import annotations

import asyncio
import io
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zmq

from common.config import Config, build
from common.log import Logger
from common.runtime import SpoolLink
from tests.support.contract_bundles import SCOPE, BundleServer, Key, payload, respond
from watcher.__main__ import Watcher
from watcher.contract_fetch import RefreshState
from watcher.contract_keeper import ContractKeeper, Refresh
from watcher.contract_verify import Accepted, Rejected

WAIT_S = 20.0


def config_for(tmp_path: Path, key: Key, url: str) -> Config:
    trust = tmp_path / "trust"
    trust.mkdir(mode=0o700)
    (trust / f"{key.keyid}.pub").write_bytes(key.pem_public)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    return build({"node": {"name": "node-a", "hall": SCOPE.hall, "node_class": SCOPE.node_class},
                  "paths": {"runtime_dir": str(run), "state_dir": str(tmp_path / "state")},
                  "relay": {"servers": []}, "metadata": {"provider": "none"},
                  "contract": {"url": url, "trust_dir": str(trust), "launch_path": str(tmp_path / "none.json")}})


def run_keeper_until(w: Watcher, done: Callable[[], bool]) -> None:
    """Run the keeper's refresh loop on this thread's event loop until ``done()`` (or fail after WAIT_S)."""

    async def drive() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(w.contracts.run(stop, lambda contract: None))
        try:
            async with asyncio.timeout(WAIT_S):
                while not done():
                    assert not task.done(), task
                    await asyncio.sleep(0.01)
        finally:
            stop.set()
            await task

    asyncio.run(drive())


@pytest.fixture
def emits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(event type, thread id) of every SpoolLink.emit from here on."""
    seen: list[tuple[str, int]] = []
    original = SpoolLink.emit

    def recording(self: SpoolLink, type: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        seen.append((type, threading.get_ident()))
        return original(self, type, *args, **kwargs)

    monkeypatch.setattr(SpoolLink, "emit", recording)
    return seen


@pytest.mark.parametrize("signer, expected", [("trusted", "contract.accepted"), ("stranger", "contract.rejected")])
def test_refresh_outcomes_are_emitted_on_the_loop_thread(tmp_path: Path, key: Key, emits: list[tuple[str, int]],
                                                         bundle_server: Callable[..., BundleServer],
                                                         signer: str, expected: str) -> None:
    """An accepted and a refused bundle: the fetch ran in a worker thread, its events on the loop's."""
    by = key if signer == "trusted" else Key("stranger")
    srv = bundle_server(respond(200, by.bundle(payload(6)), {"ETag": '"v6"'}))
    ctx = zmq.Context()
    try:
        w = Watcher(config_for(tmp_path, key, srv.url), Logger("watcher", stream=io.StringIO()), ctx)
        run_keeper_until(w, lambda: expected in [t for t, _ in emits])
    finally:
        ctx.destroy(linger=0)
    assert srv.requests, "the keeper never fetched"
    assert [t for t, _ in emits] == ["contract.builtin", expected]
    assert {thread for _, thread in emits} == {threading.get_ident()}
    if signer == "trusted":
        assert w.contracts.contract.serial == 6
        assert os.path.exists(w.contracts.lkg_path)
    else:
        assert w.contracts.contract.source == "builtin" and w.contracts.counters == {"unknown_key": 1}


def test_the_thread_half_changes_nothing_and_emits_nothing(tmp_path: Path, key: Key,
                                                          bundle_server: Callable[..., BundleServer]) -> None:
    """fetch_once only fetches, judges and persists; the state moves when adopt() takes the Refresh."""
    srv = bundle_server(respond(200, key.bundle(payload(6)), {"ETag": '"v6"'}))
    events: list[str] = []
    keeper = ContractKeeper(config_for(tmp_path, key, srv.url), Logger("watcher", stream=io.StringIO()),
                            lambda type, **kw: events.append(type))
    keeper.load()
    events.clear()
    before = keeper.state
    refresh = keeper.fetch_once()
    assert isinstance(refresh, Refresh) and isinstance(refresh.outcome, Accepted)
    assert keeper.state is before and events == []
    assert os.path.exists(keeper.lkg_path)   # persisted before anything is published
    assert keeper.adopt(refresh) is True
    assert keeper.contract.serial == 6 and events == ["contract.accepted"]


def test_a_failing_source_is_one_event_until_the_reason_changes(tmp_path: Path, key: Key) -> None:
    events: list[str] = []
    keeper = ContractKeeper(config_for(tmp_path, key, "http://127.0.0.1:9/c.json"),
                            Logger("watcher", stream=io.StringIO()), lambda type, **kw: events.append(type))
    keeper.load()
    events.clear()
    assert keeper.state is not None
    down = Refresh(RefreshState(keeper.contract, failing="fetch_error:refused"),
                   Rejected("fetch_error:refused", "connection refused"))
    assert keeper.adopt(down) is False and keeper.adopt(down) is False
    assert events == ["contract.rejected"] and keeper.counters == {"fetch_error:refused": 2}
    assert keeper.adopt(None) is False   # no URL: nothing fetched
