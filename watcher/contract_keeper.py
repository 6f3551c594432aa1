"""The watcher's contract: loaded before anything else, refreshed every 60 s, never expired.

Start: last-known-good, else the cloud-init launch subset, else the built-in
contract (said loudly: log, event, status file). Then a conditional GET of the
full bundle every 60 s with jitter, in a worker thread so a slow source never
delays a notice. An accepted bundle is persisted as last-known-good before it
is published; anything else leaves the node on the contract it has.

Threads: the worker thread only fetches, judges and persists (``fetch_once``)
and hands back a ``Refresh``; the loop thread adopts it (``adopt``): it alone
changes the keeper's state and emits events, because ``emit`` writes to the
process's zmq socket and zmq sockets must stay on one thread.
"""
from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from common import state_file
from common.config import Config
from common.contract import Contract
from common.events import EventSink
from common.log import Logger
from watcher.contract_fetch import REFRESH_JITTER_S, RefreshState, apply_fetch, fetch, next_fetch_at
from watcher.contract_store import (
    TrustLoad,
    TrustSignature,
    load_startup,
    reload_trust_dir,
    save_lkg,
    trust_signature,
)
from watcher.contract_verify import Accepted, NodeScope, Rejected
from watcher.ed25519_check import SignatureCheck, check_here
from watcher.in_thread import in_thread

LKG_FILE = "contract-lkg.json"
STATUS_FILE = "contract.json"   # what `sco-agentctl status` shows; not trusted by anyone


@dataclass(frozen=True, slots=True)
class Refresh:
    """What one fetch came to, handed from the worker thread to the loop thread."""

    state: RefreshState
    outcome: Accepted | Rejected | None   # None: nothing new (304)
    lkg_error: str = ""                   # why persisting an accepted bundle failed, if it did
    trust: TrustLoad | None = None        # the trust directory, re-read because it changed
    trust_sig: TrustSignature | None = None


class ContractKeeper:
    def __init__(self, config: Config, log: Logger, emit: EventSink,
                 check: SignatureCheck = check_here) -> None:
        self.config = config
        self.log = log
        self.emit = emit
        self.check = check   # the watcher's entry passes a check that runs in a child process
        self.scope = NodeScope(config.node.hall, config.node.node_class)
        self.lkg_path = os.path.join(config.paths.state_dir, LKG_FILE)
        self.status_path = os.path.join(config.paths.runtime_dir, STATUS_FILE)
        self.keys: dict[str, bytes] = {}
        self.trust_sig: TrustSignature | None = None   # what the trust directory held when last read
        self.state: RefreshState | None = None
        self.counters: dict[str, int] = {}

    @property
    def contract(self) -> Contract:
        if self.state is None:
            raise RuntimeError("ContractKeeper.contract read before load()")
        return self.state.contract

    def load(self) -> Contract:
        """Choose the start-up contract without any network; report every local file refused."""
        c = self.config.contract
        os.makedirs(self.config.paths.state_dir, mode=0o700, exist_ok=True)
        self.trust_sig = trust_signature(c.trust_dir)   # before the read: a change during it shows next time
        loaded = load_startup(c.trust_dir, c.launch_path, self.lkg_path, self.scope, self.check)
        self.keys = dict(loaded.trust.keys)
        self._trust_problems(loaded.trust.problems)
        for source, outcome in (("launch", loaded.startup.launch), ("lkg", loaded.startup.lkg)):
            if isinstance(outcome, Rejected):
                self._rejected(outcome, source)
        contract = loaded.startup.contract
        self.state = RefreshState(contract)
        if contract.source == "builtin":
            drain = contract.drain
            self.log.error("contract.builtin", detail="no signed contract: running on the built-in budget",
                           budget_s=drain.budget_s, checkpoint_s=drain.checkpoint_s, evict_s=drain.evict_s,
                           margin_s=drain.margin_s)
            self.emit("contract.builtin", data={"budget_s": drain.budget_s, "reason": "no signed contract"})
        else:
            self.log.info("contract.loaded", source=contract.source, serial=contract.serial)
            self.emit("contract.accepted", data={"serial": contract.serial, "source": contract.source})
        self._write_status()
        return contract

    def _trust_problems(self, problems: tuple[str, ...]) -> None:
        for problem in problems:
            # A key file refused (unreadable, not Ed25519, world-writable) or no trust directory:
            # counted like a refused bundle, so it shows in sco_agent_rejections_total.
            self.counters["trust_problem"] = self.counters.get("trust_problem", 0) + 1
            self.log.error("contract.trust_problem", detail=problem[:300])
            self.emit("contract.rejected", data={"source": "trust_dir", "reason": "trust_problem",
                                                 "detail": problem[:300]})

    def _rejected(self, outcome: Rejected, source: str) -> None:
        self.counters[outcome.reason] = self.counters.get(outcome.reason, 0) + 1
        self.log.warning("contract.rejected", source=source, reason=outcome.reason, detail=outcome.detail[:300])
        self.emit("contract.rejected", data={"source": source, "reason": outcome.reason,
                                             "detail": outcome.detail[:300]})

    def _write_status(self) -> None:
        doc = {"source": self.contract.source, "contract": self.contract.to_dict(),
               "failing": self.state.failing if self.state else None, "at": time.time()}
        state_file.save(self.status_path, doc, self.log, mode=0o644)   # 0644: read by sco-agentctl

    def fetch_once(self) -> Refresh | None:
        """The blocking half of a refresh, for the worker thread: one conditional GET, judged, and
        an accepted bundle persisted. Changes nothing in the keeper and emits nothing.

        Keys rotate without a restart: the trust directory is looked at before every fetch and
        re-read when it changed. Then the ETag is dropped, so the server sends the bundle again
        (no 304) and it is judged under the new keys: a bundle refused as unknown_key is accepted
        once its key is trusted; a removed key verifies nothing new. The contract in force is not
        judged again: it was verified when it was accepted, and a node must never lose its budget
        to a key removal (the LKG on disk is re-verified at the next start)."""
        url, state = self.config.contract.url, self.state
        if not url or state is None:
            return None
        trust_dir = self.config.contract.trust_dir
        sig, trust, keys = trust_signature(trust_dir), None, self.keys
        if sig != self.trust_sig:
            trust = reload_trust_dir(trust_dir)
            keys, state = trust.keys, replace(state, etag=None)
        new_state, outcome = apply_fetch(state, fetch(url, state.etag), self.scope, keys, self.check)
        lkg_error = ""
        if isinstance(outcome, Accepted) and outcome.changed:
            # Persist before publishing: a crash in between must not leave us on an older one.
            try:
                save_lkg(self.lkg_path, outcome.envelope)
            except OSError as e:
                lkg_error = str(e) or type(e).__name__
        return Refresh(new_state, outcome, lkg_error, trust, sig)

    def adopt(self, refresh: Refresh | None) -> bool:
        """The loop thread's half: take the new state, report it. True when the contract changed."""
        if refresh is None or self.state is None:
            return False
        old_failing, self.state, outcome = self.state.failing, refresh.state, refresh.outcome
        if refresh.trust is not None:
            self.keys, self.trust_sig = dict(refresh.trust.keys), refresh.trust_sig
            self.log.info("contract.trust_reloaded", keyids=sorted(self.keys))
            self._trust_problems(refresh.trust.problems)
            old_failing = None   # judged under other keys: report the outcome afresh
        if isinstance(outcome, Accepted) and outcome.changed:
            if refresh.lkg_error:
                self.log.error("contract.lkg_write_failed", error=refresh.lkg_error)
            self.log.info("contract.accepted", serial=outcome.contract.serial, keyid=outcome.keyid)
            self.emit("contract.accepted", data={"serial": outcome.contract.serial, "keyid": outcome.keyid,
                                                 "source": "bundle"})
            self._write_status()
            return True
        if isinstance(outcome, Rejected):
            if outcome.reason != old_failing:   # a source that stays down is one event, not one a minute
                self._rejected(outcome, "url")  # counts it, too
                self._write_status()
            else:
                self.counters[outcome.reason] = self.counters.get(outcome.reason, 0) + 1
        return False

    async def run(self, stop: asyncio.Event, on_change: Callable[[Contract], None]) -> None:
        """Refresh forever: first at once (the bundle may be newer than the launch subset)."""
        if not self.config.contract.url:
            return
        interval = self.config.contract.refresh_s
        rng = random.Random()
        while not stop.is_set():
            if self.adopt(await in_thread("contract-fetch", self.fetch_once)):
                on_change(self.contract)
            due = next_fetch_at(time.monotonic(), interval, min(REFRESH_JITTER_S, interval / 6), rng.random)
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, due - time.monotonic()))
            except TimeoutError:
                pass

