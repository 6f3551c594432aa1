"""sco-spool: the only process that opens the spool file.

Intake: a ROUTER socket. Every event that arrives in one poll round is
appended and made durable with one fdatasync (group commit), and only then
acknowledged to its sender, which resends anything unacknowledged -- so an
event acknowledged is an event on disk, and a spool SIGKILLed mid-stream
loses nothing. Recent event ids let resends of events already on disk be
acknowledged without being written twice (spool.intake).

When the disk refuses (ENOSPC, EIO, the file cannot even be created), the
round's events stay in memory (bounded, newest kept), unacknowledged, so
their senders keep them too; the write is retried every second, the episode
is reported once (log line and one ``spool.io_error`` event), and everything
held is written the moment the disk takes it again. A failed fdatasync is a
failed write: the kernel may have dropped those pages, so every event since
the last good sync is appended again (docs/spool-format.md).

Shipping to Vector runs in its own thread (spool.shipper), so a slow Vector
never delays intake. It ships to the contract's ``sink_url`` when the
watcher's contract names one (topic ``contract`` on watcher.pub), else to
``spool.vector_url``; with neither, events stay on disk.
"""
from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import zmq

from common import ipc, supervise, wire
from common.config import Config
from common.events import EventType, Origin, make_event
from common.log import Logger
from common.loop import Loop
from common.runtime import Rejections, StopFlag, start
from spool.intake import MAX_RECORD, OWN, Intake, Rejected, encode, parse_event
from spool.reader import iter_records
from spool.record import record_size
from spool.ring import SPOOL_FILE, SpoolIOError
from spool.shipping import choose_sink
from spool.store import Store, merge_drops

if TYPE_CHECKING:
    from spool.shipper import Shipper

MAX_ROUND = 2000         # messages taken per round: bounds one group commit's latency
IDLE_POLL_MS = 1000      # how soon a stop or a queued report is noticed while idle
RETRY_S = 1.0            # between attempts while the disk refuses writes
LOGGED_HERE = ("spool.dropped", "spool.recovered")   # the store has no log; the others log where they happen


@dataclass(slots=True)
class Episode:
    """The disk refusing writes, from the first failure to the next success."""

    since: float
    attempts: int
    let_go_before: int


class Spool:
    def __init__(self, config: Config, log: Logger, ctx: ipc.Context, *,
                 clock: Callable[[], float] = time.monotonic,
                 ship_options: dict[str, Any] | None = None) -> None:
        self.config = config
        self.log = log
        self.clock = clock
        self.ship_options = ship_options or {}
        self.store = Store(os.path.join(config.paths.state_dir, SPOOL_FILE), config.spool.size_mb * 2**20)
        self.intake = Intake()
        self.sock = ipc.bind(ctx, zmq.ROUTER, config.paths.runtime_dir, ipc.SPOOL_INTAKE)
        self.sub = ipc.subscriber(ctx, config.paths.runtime_dir, ipc.WATCHER_PUB, ipc.T_CONTRACT)
        self.loop = Loop()
        self.loop.on(self.sock, self.receive)
        self.loop.on(self.sub, self.on_contract)
        # A per-start stamp keeps (source, seq) of the spool's own events unique across restarts.
        self.origin = Origin(config.node.name, config.node.hall, f"spool-{os.getpid()}-{int(time.time())}")
        self.seq = 0
        self.episode: Episode | None = None
        self.retry_at = 0.0
        self.rejections = Rejections(log, emit=lambda type_, data: self.own_event(type_, data, time.time()),
                                     clock=clock)
        self._last_contract = b""
        self.drops: dict[str, Any] | None = None   # drops not yet recorded as an event (merged)
        self.drops_at = 0.0
        self.shipper: Shipper | None = None
        self.sink: str | None = None
        self.set_sink(None)
        self.try_open()

    # -- the loop --------------------------------------------------------------------
    def run(self, stop: StopFlag) -> int:
        """Serve until SIGTERM (exit 0). A shipper thread that dies of a bug is restarted in here
        (common.supervise), not by exiting: the intake goes on meanwhile."""
        self.loop.run(stop, lambda ready: self.after_round(), self.timeout_ms)
        self.shutdown()
        return 0

    def timeout_ms(self) -> int:
        if self.intake.held or not self.store.is_open:
            return max(0, min(IDLE_POLL_MS, int((self.retry_at - self.clock()) * 1000) + 1))
        return IDLE_POLL_MS

    def round(self, timeout_ms: int) -> None:
        """One poll round: take everything waiting, write it, sync once, acknowledge."""
        self.loop.once(timeout_ms)
        self.after_round()

    def after_round(self) -> None:
        """What follows the reads of a round: write, sync once, acknowledge."""
        if self.shipper is not None:
            supervise.report(self.shipper.worker, self.log, lambda t, data: self.own_event(t, data, time.time()))
        self.collect_reports()
        self.rejections.tick()
        self.attach_drops()
        due = self.clock() >= self.retry_at
        if due and not self.store.is_open:
            self.try_open()
        if due and self.intake.held and self.store.is_open:
            self.commit()
        self.send_acks()

    def receive(self) -> None:
        limit = min(MAX_RECORD, self.store.max_payload or MAX_RECORD)
        sock, offer = self.sock, self.intake.offer   # the per-event loop: no lookups
        for _ in range(MAX_ROUND):
            try:
                frames = recv_message(sock)
            except zmq.Again:
                return
            try:
                sender, event_id, payload = parse_event(frames, limit)
            except Rejected as e:
                self.rejections.add(ipc.SPOOL_INTAKE, e)
                continue
            offer(sender, event_id, payload)

    def commit(self) -> None:
        batch = self.intake.batch()
        try:
            self.store.write([payload for _, payload in batch])
        except SpoolIOError as e:
            self.io_failed(e)
            return
        self.intake.written([eid for eid, _ in batch])
        self.io_recovered()
        self.collect_reports()   # log this write's drops now, before its acks go out

    def send_acks(self) -> None:
        for sender, ids in self.intake.take_acks():
            try:
                self.sock.send_multipart([sender, *ipc.encode(ipc.T_ACK, {"ids": ids})], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass   # the sender is gone or full; it resends, and the resend is acknowledged from `recent`

    # -- the disk --------------------------------------------------------------------
    def try_open(self) -> bool:
        try:
            os.makedirs(self.config.paths.state_dir, mode=0o700, exist_ok=True)
            stats = self.store.open()
        except OSError as e:   # SpoolIOError, or the directory itself: a read-only or missing mount
            self.io_failed(e)
            return False
        self.log.info("spool.opened", **{k: v for k, v in stats.items() if isinstance(v, (int, float, str))})
        self.intake.refit(min(MAX_RECORD, self.store.max_payload))
        self.intake.remember(newest_ids(self.store.path, self.intake.recent_limit))
        if self.shipper is not None:
            self.store.changed.set()
        return True

    def io_failed(self, e: OSError) -> None:
        """Report the first failure of an episode once; retry every RETRY_S until the disk takes writes."""
        now = self.clock()
        self.retry_at = now + RETRY_S
        if self.episode is not None:
            self.episode.attempts += 1
            return
        self.episode = Episode(now, 1, self.intake.let_go)
        data = {"errno": e.errno, "error": str(e), "held": len(self.intake.held)}
        self.log.error("spool.io_error", **data)
        self.store.report("spool.io_error", data)

    def io_recovered(self) -> None:
        if self.episode is None:
            return
        ep, self.episode = self.episode, None
        self.retry_at = 0.0
        # let_go: events the memory bound dropped meanwhile; their senders still held them.
        self.log.info("spool.io_recovered", after_s=round(self.clock() - ep.since, 3), attempts=ep.attempts,
                      let_go=self.intake.let_go - ep.let_go_before)

    # -- the spool's own events ----------------------------------------------------------
    def collect_reports(self) -> None:
        for when, type_, data in self.store.take_reports():
            if type_ in LOGGED_HERE:
                self.log.warning(type_, **data)
            if type_ == "spool.dropped":
                self.drops = merge_drops(self.drops, data)
                self.drops_at = when
            else:
                self.own_event(type_, data, when)

    def own_event(self, type_: EventType, data: dict[str, Any], when: float) -> bytes:
        self.seq += 1
        ev = make_event(type_, self.origin, self.seq, data=data, now=when)
        payload = encode(ev)
        self.intake.offer(OWN, ev["event_id"], payload)
        return payload

    def attach_drops(self, force: bool = False) -> None:
        """Turn the drops reported so far into one spool.dropped event, when that cannot feed itself.

        In a full ring, writing the report drops the oldest record, whose
        report would drop the next...: a loop eating the file one record a
        round. So the report rides with the next write of other events (the
        drops *that* write causes are the next report), or goes alone only
        when it fits in free space -- as soon as shipping makes room.
        """
        if self.drops is None:
            return
        payload_size = 512 + len(str(self.drops))   # an upper bound of the encoded event
        if not (force or self.intake.held or 2 * record_size(payload_size) <= self.store.free_bytes()):
            return
        drops, self.drops = self.drops, None
        self.own_event("spool.dropped", drops, self.drops_at)

    @property
    def rejected(self) -> int:
        return self.rejections.total

    # -- where events go ---------------------------------------------------------------
    def on_contract(self) -> None:
        for frames in ipc.pending(self.sub):
            if len(frames) == 2 and frames[1] == self._last_contract:
                continue   # the watcher re-announces every second; validate only what changed
            try:
                _, body = ipc.decode(frames)
                contract = wire.decode_contract(body)
            except (ipc.BadMessage, ValueError, TypeError) as e:
                self.rejections.add(ipc.WATCHER_PUB, e)
                continue
            self._last_contract = frames[1]
            self.set_sink(contract.sink_url)

    def set_sink(self, contract_url: str | None) -> None:
        url = choose_sink(self.config.spool.vector_url, contract_url)
        if url == self.sink:
            return
        self.sink = url
        self.log.info("ship.sink", url=url, origin="contract" if contract_url else "config")
        if self.shipper is not None:
            self.shipper.retarget(url)
        elif url is not None:
            # Imported only once there is somewhere to ship: http.client and ssl cost ~4 MiB.
            from spool.shipper import Shipper

            self.shipper = Shipper(self.store, self.log, url, self.config.spool.batch_max, **self.ship_options)
            self.shipper.start()

    # -- stopping ------------------------------------------------------------------------
    def shutdown(self) -> None:
        """SIGTERM: take what is already queued, write it and the spool's own events, close the file."""
        self.receive()
        self.rejections.tick(force=True)
        stopped = self.shipper.stop() if self.shipper is not None else True
        self.collect_reports()
        # Recording N drops is worth the one more record it may cost in a full file (that one is logged).
        self.attach_drops(force=True)
        if self.intake.held and (self.store.is_open or self.try_open()):
            self.commit()
        self.send_acks()
        self.collect_reports()   # only to log what that last write dropped: it cannot be recorded now
        try:
            self.store.close()
        except SpoolIOError as e:
            self.log.error("spool.io_error", op="close", error=str(e))
        ship = self.shipper
        self.log.info("process.stopped", held=len(self.intake.held), rejected=self.rejected,
                      unrecorded_drops=self.drops["dropped"] if self.drops else 0,
                      resends=self.intake.resends, shipper_stopped=stopped,
                      shipped=ship.shipped if ship else 0, set_aside=ship.set_aside if ship else 0)


def newest_ids(path: str, n: int) -> list[str]:
    """The event ids of the newest ``n`` records in the spool file, oldest first (read-only, at open).

    The payloads are the spool's own encoding, whose first key is event_id: the id is cut out of
    the first bytes rather than parsing every payload.
    """
    ids: deque[str] = deque(maxlen=n)
    prefix = b'{"event_id":"'
    try:
        for rec in iter_records(path, from_head=False):
            payload = rec.payload
            if payload.startswith(prefix):
                end = payload.find(b'"', len(prefix))
                if end > 0:
                    ids.append(payload[len(prefix):end].decode(errors="replace"))
    except OSError:
        return []   # an unreadable file was reported by the open itself; dedupe starts empty
    return list(ids)


def recv_message(sock: ipc.Socket) -> list[bytes]:
    """``recv_multipart(NOBLOCK)`` without a getsockopt(RCVMORE) per frame: 3.7 instead of 5.6 us
    a message (measured), the largest single cost of intake. Raises zmq.Again when nothing waits;
    the frames of one message arrive together, so only the first can."""
    frames = []
    while True:
        frame = sock.recv(zmq.NOBLOCK, copy=False)
        frames.append(frame.bytes)
        if not frame.more:
            return frames


def main(argv: list[str] | None = None) -> int:
    config, log = start("spool", argv)
    stop = StopFlag()
    ctx = zmq.Context()
    try:
        return Spool(config, log, ctx).run(stop)
    finally:
        ipc.destroy(ctx, log)


if __name__ == "__main__":
    sys.exit(main())
