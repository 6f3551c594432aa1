"""sco-watcher: hears notices on every channel and announces the current notice state.

Inputs: the NATS relay (per-node and hall-wide subjects) and a poll of the
instance metadata service. Output: the level-triggered notice state on
``watcher.pub``, re-announced every second and at once on change, and
persisted under the runtime directory so a restarted watcher (or a restarted
executor listening to it) picks the drain up where it was.
"""
from __future__ import annotations

import asyncio
import os
import sys
import time

import ujson
import zmq

from common import ipc
from common.config import Config
from common.fsutil import write_atomic
from common.log import Logger
from common.notice import Notice, Rejected, parse_relay_payload
from common.runtime import SpoolLink, start
from watcher.contract_keeper import ContractKeeper, contract_message
from watcher.inject import inject_dir, read_injected
from watcher.notice_book import NoticeBook, Outcome
from watcher.providers import MetadataError, make_source

ANNOUNCE_EVERY_S = 1.0
TICK_S = 1.0   # idle wake-up; a change is announced at once via the `changed` event
STATE_FILE = "notice.json"


class Watcher:
    """The imperative shell around NoticeBook: feed it, persist it, announce it."""

    def __init__(self, config: Config, log: Logger, ctx: zmq.Context) -> None:
        self.config = config
        self.log = log
        self.state_path = os.path.join(config.paths.runtime_dir, STATE_FILE)
        self.book = self._load_book()
        self.pub = ipc.bind(ctx, zmq.PUB, config.paths.runtime_dir, ipc.WATCHER_PUB)
        self.spool = SpoolLink(ctx, config, "watcher", log)
        self.counters: dict[str, int] = {}
        # Counters restart with the process; the verifier tells starts apart by this.
        self.started_at = time.time()
        # Every channel a notice arrived on, first arrival each (for the verdict's timeline).
        self.arrivals: dict[str, dict[str, float]] = {}
        self.changed = asyncio.Event()
        # The contract comes first: the drain budget must be known before any work lands.
        self.contracts = ContractKeeper(config, log, self.spool.emit)
        self.contracts.load()

    def _load_book(self) -> NoticeBook:
        node = self.config.node.name
        try:
            with open(self.state_path, "rb") as f:
                return NoticeBook.restore(node, ujson.loads(f.read(1 << 20)))
        except FileNotFoundError:
            return NoticeBook(node=node)
        except (ValueError, OSError, TypeError) as e:
            # A corrupt state file must not stop the watcher: start empty, the
            # channels will re-deliver a live notice within one poll.
            self.log.error("state.corrupt", path=self.state_path, error=str(e)[:300])
            return NoticeBook(node=node)

    def count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1

    # -- inputs ---------------------------------------------------------------
    def on_relay_payload(self, payload: bytes, subject: str) -> None:
        now = time.time()
        try:
            notice = parse_relay_payload(payload, self.config.relay.max_payload)
        except Rejected as e:
            self.reject(e, "relay", len(payload), subject=subject[:200])
            return
        self.observe(notice.with_arrival("relay", now), now)

    def on_injected(self) -> None:
        """Notices written by `sco-agentctl simulate`: the "local" channel, validated like the relay's."""
        for name, result in read_injected(inject_dir(self.config.paths.runtime_dir),
                                          self.config.relay.max_payload):
            now = time.time()
            if isinstance(result, Rejected):
                self.reject(result, "local", 0, file=name[:200])
            else:
                self.observe(result.with_arrival("local", now), now)

    def reject(self, e: Rejected, channel: str, size: int, **where: str) -> None:
        self.count(f"rejected.{e.reason}")
        self.log.warning("notice.rejected", channel=channel, reason=e.reason, detail=e.detail[:300],
                         size=size, **where)
        self.spool.emit("notice.rejected", data={"channel": channel, "reason": e.reason,
                                                 "detail": e.detail[:300], "size": size})

    def observe(self, notice: Notice, now: float) -> None:
        outcome = self.book.observe(notice, now)
        self.count(f"{outcome.action}.{notice.channel}")
        held = outcome.earlier if outcome.action == "duplicate" else outcome.notice
        if outcome.action in ("new", "duplicate") and held is not None:
            self.arrivals.setdefault(held.id, {}).setdefault(notice.channel, notice.received_at or now)
        self._report(outcome, now)
        if outcome.action in ("new", "withdrawn"):
            self.persist()
            self.changed.set()

    def _report(self, outcome: Outcome, now: float) -> None:
        n = outcome.notice
        if outcome.action == "new":
            data = {"kind": n.kind, "channel": n.channel, "source": n.source, "detail": n.detail,
                    "issued_at": n.to_dict()["issued_at"], "deadline": n.to_dict()["deadline"],
                    "received_at": round(n.received_at, 3),
                    "late": n.deadline < now}
            self.log.info("notice.received", notice_id=n.id, **data)
            self.spool.emit("notice.received", n.id, data, now)
        elif outcome.action == "duplicate":
            # The first arrival stays the receive time; a later channel is recorded once.
            earlier = outcome.earlier
            self.log.debug("notice.duplicate", notice_id=earlier.id if earlier else n.id,
                           channel=n.channel)
        elif outcome.action == "withdrawn":
            self.log.info("notice.withdrawn", notice_id=n.id)
            self.spool.emit("notice.withdrawn", n.id, {"kind": n.kind}, now)
        elif outcome.reason != "withdrawn":
            self.log.info("notice.ignored", notice_id=n.id, reason=outcome.reason, node=n.node[:200])
            self.spool.emit("notice.ignored", n.id, {"reason": outcome.reason, "node": n.node[:200]}, now)

    def on_relay_status(self, status: str, detail: str) -> None:
        self.count(f"relay.{status}")
        level = self.log.warning if status in ("error", "disconnected") else self.log.info
        level(f"relay.{status}", detail=detail)

    # -- outputs ----------------------------------------------------------------
    def persist(self) -> None:
        try:
            write_atomic(self.state_path, ujson.dumps(self.book.snapshot()).encode())
        except OSError as e:
            self.log.error("state.write_failed", path=self.state_path, error=str(e))

    def announce(self) -> None:
        ipc.send(self.pub, ipc.T_CONTRACT, contract_message(self.contracts.contract))
        snap = self.book.snapshot()
        for nid in [i for i in self.arrivals if i not in self.book.active]:
            del self.arrivals[nid]
        ipc.send(self.pub, ipc.T_NOTICE, {"gen": snap["gen"], "active": snap["active"],
                                          "withdrawn": list(snap["withdrawn"]),
                                          "arrivals": self.arrivals, "counters": self.counters,
                                          "started_at": self.started_at})


async def poll_metadata(w: Watcher, stop: asyncio.Event) -> None:
    try:
        source = make_source(w.config)
    except ValueError as e:
        w.log.error("metadata.disabled", error=str(e))
        return
    if source is None:
        return
    interval = w.config.metadata.poll_interval_s
    while not stop.is_set():
        started = time.monotonic()
        try:
            result = await asyncio.to_thread(source.poll, time.time())
        except MetadataError as e:
            w.count(f"metadata.error.{e.reason}")
            w.log.warning("metadata.error", provider=source.name, reason=e.reason, detail=e.detail[:300])
        else:
            now = time.time()
            for notice in result.notices:
                w.observe(notice.with_arrival("metadata", notice.received_at or now), now)
            for nid in result.withdrawn:
                outcome = w.book.withdraw(nid, now)
                if outcome is not None:
                    w._report(outcome, now)
                    w.persist()
                    w.changed.set()
        wait = max(0.0, interval - (time.monotonic() - started))
        try:
            await asyncio.wait_for(stop.wait(), timeout=wait)
        except TimeoutError:
            pass


async def announce_loop(w: Watcher, stop: asyncio.Event) -> None:
    last = 0.0
    while not stop.is_set():
        w.spool.on_readable()
        w.spool.tick()
        w.on_injected()
        now = time.monotonic()
        if w.changed.is_set() or now - last >= ANNOUNCE_EVERY_S:
            w.changed.clear()
            w.announce()
            last = now
            w.book.forget_old(time.time())
        try:
            await asyncio.wait_for(w.changed.wait(), timeout=TICK_S)
        except TimeoutError:
            pass


async def run(config: Config, log: Logger) -> int:
    from watcher.relay import run_relay

    ctx = zmq.Context()
    w = Watcher(config, log, ctx)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    w.announce()
    tasks = [
        asyncio.create_task(run_relay(config, w.on_relay_payload, w.on_relay_status, stop)),
        asyncio.create_task(poll_metadata(w, stop)),
        asyncio.create_task(announce_loop(w, stop)),
        asyncio.create_task(w.contracts.run(stop, lambda contract: w.changed.set())),
    ]
    await stop.wait()
    for t in tasks:
        try:
            await asyncio.wait_for(t, timeout=3)
        except (TimeoutError, Exception):  # noqa: BLE001 -- stopping; report and move on
            t.cancel()
    w.spool.flush(1.0)
    ctx.destroy(linger=0)
    log.info("process.stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    config, log = start("watcher", argv)
    return asyncio.run(run(config, log))


if __name__ == "__main__":
    sys.exit(main())
