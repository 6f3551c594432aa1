"""sco-spool: the only process that opens the spool file.

Intake: a ROUTER socket. Every event that arrives in one poll round is
appended and made durable with one fdatasync (group commit), and only then
acknowledged to its sender, which resends anything unacknowledged -- so an
event acknowledged is an event on disk, and a spool SIGKILLed mid-stream
loses nothing. A bounded memory of recent event ids drops resends that are
already on disk. Shipping to Vector runs in its own thread (spool.shipper)
so a slow Vector never delays intake.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections import OrderedDict, defaultdict
from typing import Any

import ujson
import zmq

from common import ipc
from common.config import Config
from common.events import make_event
from common.log import Logger
from common.runtime import StopFlag, start
from common.timefmt import format_rfc3339
from spool.ring import SpoolIOError, SpoolRing

SPOOL_FILE = "spool.dat"
MAX_BATCH = 2000           # events per group commit; bounds the latency of one round
RECENT_IDS = 50000         # dedupe memory for resent events
PENDING_LIMIT = 20000      # events held in memory while the disk refuses writes


class Spool:
    def __init__(self, config: Config, log: Logger, ctx: zmq.Context) -> None:
        self.config = config
        self.log = log
        self.node = config.node.name
        self.hall = config.node.hall
        os.makedirs(config.paths.state_dir, mode=0o700, exist_ok=True)
        self.path = os.path.join(config.paths.state_dir, SPOOL_FILE)
        self.lock = threading.Lock()   # the ring is shared with the shipper thread
        self.ring: SpoolRing | None = None
        self.sock = ipc.bind(ctx, zmq.ROUTER, config.paths.runtime_dir, ipc.SPOOL_INTAKE)
        self.recent: OrderedDict[str, None] = OrderedDict()
        # Events accepted while the disk refuses writes: newest kept, oldest dropped (counted).
        self.pending: list[tuple[bytes, dict[str, Any]]] = []
        self.pending_dropped = 0
        self.rejected = 0
        self.seq = 0
        self.open_ring()

    def open_ring(self) -> bool:
        try:
            self.ring = SpoolRing.open(self.path, size=self.config.spool.size_mb * 2**20)
        except SpoolIOError as e:
            self.log.error("spool.io_error", op="open", error=str(e))
            self.ring = None
            return False
        stats = self.ring.stats()
        self.log.info("spool.opened", **{k: v for k, v in stats.items() if isinstance(v, (int, float, str))})
        if stats.get("recovered_cut_bytes") or stats.get("recovered_skipped"):
            self.own_event("spool.recovered", {k: stats.get(k) for k in
                                               ("recovered_cut_bytes", "recovered_skipped")})
        return True

    def own_event(self, type: str, data: dict[str, Any]) -> None:
        """An event the spool itself reports goes straight into the ring."""
        self.seq += 1
        ev = make_event(type, node=self.node, hall=self.hall, source="spool", seq=self.seq, data=data)
        self.pending.append((b"", ev))

    def intake(self, frames: list[bytes]) -> tuple[bytes, dict[str, Any]] | None:
        if len(frames) < 2:
            self.rejected += 1
            return None
        identity = frames[0]
        try:
            topic, body = ipc.decode(frames[1:])
            if topic != ipc.T_EVENT or not isinstance(body.get("event_id"), str) \
                    or not isinstance(body.get("type"), str):
                raise ipc.BadMessage("not an event")
        except ipc.BadMessage as e:
            self.rejected += 1
            self.log.warning("ipc.rejected", socket=ipc.SPOOL_INTAKE, error=str(e)[:300])
            return None
        return identity, body

    def round(self, poller: zmq.Poller, timeout_ms: int) -> None:
        """One poll round: take everything waiting, write it, sync once, acknowledge."""
        batch = self.pending
        self.pending = []
        if poller.poll(timeout_ms):
            while len(batch) < MAX_BATCH:
                try:
                    frames = self.sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                item = self.intake(frames)
                if item is not None:
                    batch.append(item)
        if batch:
            self.commit(batch)

    def commit(self, batch: list[tuple[bytes, dict[str, Any]]]) -> None:
        fresh = [(ident, ev) for ident, ev in batch if ev["event_id"] not in self.recent]
        if fresh and not self._write([ev for _, ev in fresh]):
            self._hold(fresh)
            return
        acks: dict[bytes, list[str]] = defaultdict(list)
        for ident, ev in batch:
            self._remember(ev["event_id"])
            if ident:
                acks[ident].append(ev["event_id"])
        for ident, ids in acks.items():
            try:
                self.sock.send_multipart([ident, *ipc.encode(ipc.T_ACK, {"ids": ids})], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass   # the sender is gone; it resends when it is back

    def _write(self, events: list[dict[str, Any]]) -> bool:
        if self.ring is None and not self.open_ring():
            return False
        payloads = [ujson.dumps(ev, ensure_ascii=False).encode() for ev in events]
        try:
            with self.lock:
                result = self.ring.append(payloads)
                self.ring.sync()
        except SpoolIOError as e:
            self.log.error("spool.io_error", op="append", error=str(e))
            return False
        if result.dropped is not None:
            d = result.dropped
            data = {"dropped": d.count, "first_seq": d.first_seq, "last_seq": d.last_seq,
                    "first_ts": format_rfc3339(d.first_ts), "last_ts": format_rfc3339(d.last_ts)}
            self.log.warning("spool.dropped", **data)
            self.own_event("spool.dropped", data)
        return True

    def _hold(self, batch: list[tuple[bytes, dict[str, Any]]]) -> None:
        """Disk refused: keep the newest events in memory (bounded), unacknowledged, and retry."""
        combined = self.pending + batch
        lost = max(0, len(combined) - PENDING_LIMIT)
        self.pending = combined[-PENDING_LIMIT:]
        self.pending_dropped += lost

    def _remember(self, event_id: str) -> None:
        self.recent[event_id] = None
        if len(self.recent) > RECENT_IDS:
            self.recent.popitem(last=False)


def main(argv: list[str] | None = None) -> int:
    config, log = start("spool", argv)
    stop = StopFlag()
    ctx = zmq.Context()
    spool = Spool(config, log, ctx)
    shipper = None
    if config.spool.vector_url:
        from spool.shipper import Shipper

        shipper = Shipper(spool, config, log)
        shipper.start()
    poller = zmq.Poller()
    poller.register(spool.sock, zmq.POLLIN)
    while not stop.stopping:
        # With events held back by a full disk, retry every second; else sleep in poll.
        spool.round(poller, 1000 if spool.pending else 500)
        if spool.pending:
            time.sleep(0.2)
    if shipper is not None:
        shipper.stop()
    if spool.ring is not None:
        with spool.lock:
            spool.ring.close()
    ctx.destroy(linger=0)
    log.info("process.stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
