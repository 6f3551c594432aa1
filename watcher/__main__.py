"""sco-watcher: hears notices on every channel and announces the current notice state.

Inputs: the NATS relay (per-node and hall-wide subjects, ``watcher.relay``)
and a poll of the instance metadata service (``watcher.metadata_loop``).
Output: the level-triggered notice state on ``watcher.pub``, re-announced
every second and at once on change, and persisted in the state directory
(``notice.json``: a unit restart removes the runtime directory, and a relay
notice is not sent again) so a restarted watcher (or a restarted executor
listening to it) picks the drain up where it was. The drain progress the executor publishes
tells the metadata source when a drain is done (Azure acknowledges).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

import zmq

from common import ipc, notice_state, progress, proven, state_file, verdict, wire
from common.config import Config
from common.log import Logger
from common.notice import Notice, Rejected, parse_relay_payload
from common.recorder import Recorder
from common.runtime import EXIT_CONFIG, Rejections, SpoolLink, StopFlag, start
from watcher import event_loop, notice_file
from watcher.ack_gate import AckGate
from watcher.asyncio_import import asyncio  # first: asyncio without logging, traceback, concurrent.futures
from watcher.boot import boot_id
from watcher.contract_keeper import ContractKeeper
from watcher.contract_store import TrustDirUnsafe
from watcher.ed25519_check import SignatureCheck, check_here, in_child
from watcher.inject import inject_dir, read_injected
from watcher.metadata_loop import Round, poll_metadata
from watcher.notice_book import Outcome
from watcher.notice_file import MAX_STATE, STATE_FILE
from watcher.notice_report import Report, describe, say
from watcher.providers import MetadataError, MetadataSource
from watcher.relay import STATUS_EVENTS, run_relay
from watcher.tasks import supervised

ANNOUNCE_EVERY_S = 1.0
TICK_S = ANNOUNCE_EVERY_S   # idle wake-up; a change in the notices is announced at once
# A repeated error is logged (and sent to the spool) again only after this long;
# every occurrence is still counted (common/recorder.py).
REPEAT_REPORT_S = 60.0


class Watcher:
    """The imperative shell around NoticeBook: feed it, persist it, announce it."""

    def __init__(self, config: Config, log: Logger, ctx: ipc.Context, check: SignatureCheck = check_here) -> None:
        self.config = config
        self.log = log
        rd = config.paths.runtime_dir
        self.state_path = os.path.join(config.paths.state_dir, STATE_FILE)
        self.state = state_file.Kept(self.state_path, os.path.join(rd, STATE_FILE), MAX_STATE, log)
        self.boot_id = boot_id()
        self.book, booted_in, unreported = notice_file.load(self.state, config.node.name, self.boot_id, log)
        # Events made for a change of the book, saved with it and not yet journalled (``persist``):
        # a watcher killed between the save and the journal would otherwise lose them for good.
        self.unreported: list[dict[str, Any]] = []
        self.pub = ipc.bind(ctx, zmq.PUB, rd, ipc.WATCHER_PUB)
        self.progress_sub = ipc.subscriber(ctx, rd, ipc.EXECUTOR_PUB, ipc.T_PROGRESS)
        self.verdict_sub = ipc.subscriber(ctx, rd, ipc.VERIFIER_PUB, ipc.T_VERDICT)   # the ack waits for them
        self.disconnects = ipc.Disconnects(rd, {ipc.EXECUTOR_PUB: self.progress_sub, ipc.VERIFIER_PUB: self.verdict_sub})
        self.spool = SpoolLink(ctx, config, "watcher", log)
        for ev in unreported:
            self.spool.adopt(ev)
        self.counters: dict[str, int] = {}
        self.rejections = Rejections(log, emit=self.spool.emit, counts=self.counters)
        # Counters restart with the process; the verifier tells starts apart by this.
        self.started_at = time.time()
        # Its repeat is an interval: on the monotonic clock (Recorder's default).
        self.reports: Recorder[Report] = Recorder(lambda t, d: say(self.log, self.spool.emit, t, d), REPEAT_REPORT_S)
        self.metadata_failing = ""            # the reason while the metadata service fails
        self.metadata_wake: asyncio.Event | None = None
        self.gate = AckGate()                 # finished drains until their verdict (watcher.ack_gate)
        self.drained_pending: list[str] = []
        self.changed = asyncio.Event()        # set: announce at the next turn of the tick loop
        # The relay's notices observed but not yet persisted, announced and reported (``flush``):
        # the book's generation before them, and each outcome with its time.
        self.burst: tuple[int, list[tuple[Outcome, float]]] | None = None
        # The contract comes first: the drain budget must be known before any work lands.
        self.contracts = ContractKeeper(config, log, self.spool.emit, check)
        self.contracts.load()
        if booted_in != self.boot_id:
            self.retire_past(time.time())
            # Written down as this boot's at once: a deadline passing later in this boot, then a
            # restart, must not count as an earlier boot's.
            self.book.dirty = True
            self.persist()


    def retire_past(self, now: float) -> None:
        """Notices of an earlier boot whose deadline has passed are withdrawn (the executor undoes
        their cordon): the reclaim or maintenance they announced has happened -- the machine was
        stopped and started again, or rebooted. Within one boot a passed deadline retires nothing:
        the machine may be going any second, and the drain's record keeps it from being redone."""
        for n in [n for n in self.book.active.values() if n.deadline < now]:
            gen = self.book.gen
            if self.book.withdraw(n.id, now) is not None:
                self.count("expired")
                data = {"kind": n.kind, "deadline_passed_s": round(now - n.deadline, 3), "reason": "earlier_boot"}
                self.log.info("notice.expired", notice_id=n.id, **data)
                # by the agent itself: reason
                self._after_change(gen, [self.spool.prepare("notice.withdrawn", n.id, data, now)])

    def count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1

    # -- inputs: notices --------------------------------------------------------
    def on_relay_payload(self, payload: bytes, subject: str) -> None:
        now = time.time()
        try:
            notice = parse_relay_payload(payload, self.config.relay.max_payload)
        except Rejected as e:
            self.reject(e, "relay", len(payload), now, subject=subject[:200])
            return
        self.observe(notice.with_arrival("relay", now), now, burst=True)

    def on_injected(self) -> None:
        """Notices written by `sco-agentctl simulate`: the "local" channel, validated like the relay's."""
        for name, result in read_injected(inject_dir(self.config.paths.runtime_dir),
                                          self.config.relay.max_payload):
            now = time.time()
            if isinstance(result, Rejected):
                self.reject(result, "local", 0, now, file=name[:200])
            else:
                self.observe(result.with_arrival("local", now), now)

    def reject(self, e: Rejected, channel: str, size: int, now: float, **where: str) -> None:
        """Count every rejection; log and send it to the spool once a minute per reason."""
        self.count(f"rejected.{e.reason}")
        self.reports.record("notice.rejected", e.reason, {"channel": channel, "reason": e.reason,
                            "detail": e.detail[:300], "size": size, "log_only": where})

    def observe(self, notice: Notice, now: float, burst: bool = False) -> Outcome:
        """Feed one notice to the book; persist, announce, report. ``burst`` (the relay's): saved and
        announced once per turn of the event loop (``flush``), or a flood overflows the relay's queue."""
        if not burst:
            self.flush()   # the relay's before this one, in the order they came
        gen = self.book.gen
        outcome = self.book.observe(notice, now)
        self.count(f"{outcome.action}.{notice.channel}")
        if outcome.reason:
            self.count(f"ignored.reason.{outcome.reason}")
        if burst:
            if self.burst is None:
                self.burst = (gen, [])
                try:
                    asyncio.get_running_loop().call_soon(self.flush)
                except RuntimeError:   # no event loop (a test feeding payloads by hand): at once
                    self.burst[1].append((outcome, now))
                    self.flush()
                    return outcome
            self.burst[1].append((outcome, now))
            return outcome
        # Persist (and announce) with the event: a watcher killed in between would otherwise learn
        # the notice again from the metadata poll and report it received a second time, or never.
        self._after_change(gen, self._report(outcome, now))
        return outcome

    def flush(self) -> None:
        """The relay's notices observed since the last turn of the event loop: persisted and announced
        (once), then reported."""
        if self.burst is None:
            return
        (gen, outcomes), self.burst = self.burst, None
        self._after_change(gen, [ev for outcome, now in outcomes for ev in self._report(outcome, now)])

    def withdraw(self, notice_id: str, channel: str, now: float) -> None:
        self.flush()
        gen = self.book.gen
        outcome = self.book.withdraw(notice_id, now)
        if outcome is not None:
            self.count(f"withdrawn.{channel}")
            self._after_change(gen, self._report(outcome, now))

    def _after_change(self, gen: int, events: list[dict[str, Any]]) -> None:
        """Persist the book with the events that report its change, announce it, then journal and send
        the events: a watcher killed at any point between still knows what it announced, and its next
        start sends the events again under the same ids (at-least-once; the far end dedupes on them)."""
        self.unreported = events
        if self.book.dirty:
            self.persist()
        if self.book.gen != gen:
            self.announce()
        for ev in events:
            self.spool.commit(ev)
        # In the journal now: the next save leaves them out.
        self.unreported = []

    def _report(self, outcome: Outcome, now: float) -> list[dict[str, Any]]:
        """The event that reports ``outcome``, made but not yet sent (``_after_change`` sends it)."""
        said = describe(outcome, now)
        if said is None:
            return []
        type_, notice_id, data = said
        if type_ == "notice.ignored":   # once a minute per reason, not per notice
            self.reports.record(type_, outcome.reason, {**data, "notice_id": notice_id})
            return []
        self.log.info(type_, notice_id=notice_id, **data)
        return [self.spool.prepare(type_, notice_id, data, now)]

    # -- inputs: the metadata loop (watcher.metadata_loop.Host) -------------------
    def metadata_started(self, source: MetadataSource, wake: asyncio.Event) -> None:
        source.resume(self.book.known_notices())
        self.metadata_wake = wake

    def on_metadata_round(self, source: str, rnd: Round) -> None:
        now = rnd.done_at
        self.drained_pending += [i for i in rnd.unreported if i not in self.drained_pending]
        if rnd.error is not None:
            self._metadata_error(source, rnd.error, now)
            return
        if rnd.result is None:   # a round ends with an error or a result
            raise RuntimeError("metadata round ended with neither a result nor an error")
        for e in rnd.result.errors:
            self._metadata_error(source, e, now)
        if self.metadata_failing and not rnd.result.errors:
            self.log.info("metadata.recovered", provider=source, after=self.metadata_failing)
            self.metadata_failing = ""
        for notice in rnd.result.notices:
            self.observe(notice.with_arrival("metadata", now), now)
        for nid in rnd.result.withdrawn:
            self.withdraw(nid, "metadata", now)

    def _metadata_error(self, source: str, e: MetadataError, now: float) -> None:
        self.count(f"metadata.error.{e.reason}")
        self.reports.record("metadata.error", e.reason, {"provider": source, "reason": e.reason, "detail": e.detail})
        self.metadata_failing = e.reason

    def on_metadata_disabled(self, error: str) -> None:
        self.count("metadata.disabled")
        self.log.error("metadata.disabled", error=error)

    def take_drained(self) -> list[str]:
        out, self.drained_pending = self.drained_pending, []
        return out

    # -- inputs: relay status, executor progress -----------------------------------
    def on_relay_status(self, status: str, detail: str) -> None:
        self.count(f"relay.{status}")
        now = time.time()
        if status in ("error", "slow_consumer"):
            self.reports.record("relay.error" if status == "error" else "relay.slow_consumer", status, {"detail": detail[:300]})
            return
        level = self.log.warning if status in ("error", "slow_consumer", "disconnected", "closed") else self.log.info
        level(f"relay.{status}", detail=detail)
        event = STATUS_EVENTS.get(status)
        if event is not None:
            self.spool.emit(event, data={"detail": detail[:300]}, now=now)

    def on_progress_readable(self) -> None:
        for frames in ipc.pending(self.progress_sub):
            try:
                _, body = ipc.decode(frames)
                records, refused = progress.decode_progress(body)
            except (ipc.BadMessage, wire.BadRecord) as e:
                self.rejections.add(ipc.EXECUTOR_PUB, e)
                continue
            if refused:   # counted once per message; the good records next to them still count
                nid, why = next(iter(refused.items()))
                self.rejections.add(ipc.EXECUTOR_PUB, wire.BadRecord(
                    f"{len(refused)} drain record(s) refused, e.g. {nid[:64]!r}: {why}"))
            self.gate.finished(records, time.time())
        judged: dict[str, str] = {}
        for frames in ipc.pending(self.verdict_sub):
            try:
                judged.update(verdict.decode_verdict_news(ipc.decode(frames)[1]))
            except (ipc.BadMessage, verdict.BadNews) as e:
                self.rejections.add(ipc.VERIFIER_PUB, e)
        for nid in self.gate.due(judged, time.time()):   # finished and judged (or waited for): acknowledge
            held = self.book.resolve(nid)
            ids = self.book.ids_of(held) if held in self.book.active else [nid]
            self.drained_pending += [i for i in ids if i not in self.drained_pending]
            if self.metadata_wake is not None:
                self.metadata_wake.set()

    # -- outputs --------------------------------------------------------------------
    def persist(self) -> None:
        doc = self.book.snapshot()
        doc["boot_id"] = self.boot_id
        doc["unreported"] = self.unreported
        if self.state.save(doc):
            self.book.dirty = False
        else:   # retried every tick; meanwhile the fallback copy holds it
            self.count("state.write_failed")

    def announce(self) -> None:
        ipc.send(self.pub, ipc.T_CONTRACT, wire.encode_contract(self.contracts.contract), self.refused)
        # Only the newest withdrawn ids (common.notice_state.recent; receivers: NoticeState.gone).
        state = notice_state.NoticeState(active=self.book.active, withdrawn=self.book.recent_withdrawn(),
                                 arrivals=self.book.arrivals, counters=self.published_counters(),
                                 started_at=self.started_at, gen=self.book.gen, book_since=self.book.created_at)
        ipc.send(self.pub, ipc.T_NOTICE, state.encode(), self.refused)

    def refused(self, e: ipc.TooLarge) -> None:
        """A message over what its receivers accept was not sent: counted (published) and reported."""
        self.rejections.add(ipc.WATCHER_PUB, e)

    def published_counters(self) -> dict[str, int]:
        """The watcher's counters and the contract keeper's rejections (``contract.rejected.<reason>``)."""
        out = dict(self.counters)
        for reason, n in self.contracts.counters.items():
            out[f"contract.rejected.{reason.replace(':', '_')}"] = n
        return out

    def tick(self) -> None:
        """A turn: spool acks and resends, progress and verdicts (ack_gate), injected notices, the re-announce."""
        self.flush()
        self.spool.on_readable()
        self.spool.tick()
        self.rejections.tick()
        self.reports.tick()
        self.rejections.count_disconnects(self.disconnects)   # published with the counters
        self.on_progress_readable()
        self.on_injected()
        self.book.forget_old(time.time())
        if self.book.dirty:
            self.persist()
        self.announce()


async def tick_loop(w: Watcher, stop: asyncio.Event) -> None:
    """A turn every TICK_S (= the 1 s re-announce), or at once when ``changed`` (a new contract).

    A change in the notices is announced where it happens, without waiting for a turn.
    """
    while not stop.is_set():
        w.changed.clear()
        w.tick()
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(w.changed.wait())]
        await asyncio.wait(waiters, timeout=TICK_S, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()


async def run(config: Config, log: Logger, check: SignatureCheck = check_here) -> int:
    ctx = zmq.Context()
    try:
        w = Watcher(config, log, ctx, check)
    except TrustDirUnsafe as e:
        # Anyone could drop a key in and sign their own drain budget: refuse to start
        # (supervisord shows the failure) rather than run on a contract nobody vouches for.
        log.error("contract.trust_dir_unsafe", error=str(e))
        ipc.destroy(ctx, log)
        return EXIT_CONFIG
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    flag = StopFlag(on_stop=lambda: loop.call_soon_threadsafe(stop.set))
    w.announce()
    loops = {"run_relay": lambda: run_relay(config, w.on_relay_payload, w.on_relay_status, stop),
             "poll_metadata": lambda: poll_metadata(w, config, stop), "tick_loop": lambda: tick_loop(w, stop),
             "contract_refresh": lambda: w.contracts.run(stop, lambda contract: w.changed.set())}
    # A loop that raises runs again after a pause (watcher.tasks); should a task still fail, the
    # watcher exits non-zero rather than live on deaf or silent. One that returns is no failure.
    tasks = [asyncio.create_task(supervised(name, run, stop, log, w.spool.emit)) for name, run in loops.items()]
    pending: set[asyncio.Future[Any]] = {asyncio.ensure_future(stop.wait()), *tasks}
    failed: list[asyncio.Task[Any]] = []
    while not stop.is_set() and not failed:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        failed = [t for t in tasks if t in done and not t.cancelled() and t.exception() is not None]
    for t in failed:
        exc = t.exception()
        # Every task here runs a coroutine function, whose name says which loop died.
        task = getattr(t.get_coro(), "__name__", t.get_name())
        log.error("process.task_failed", task=task, error=f"{type(exc).__name__}: {exc}"[:300])
    stop.set()
    for t in tasks:
        try:
            await asyncio.wait_for(t, timeout=3)
        except (TimeoutError, Exception):  # noqa: BLE001 -- stopping; report and move on
            t.cancel()
    w.rejections.tick(force=True)
    w.reports.tick(force=True)
    w.spool.flush(1.0)
    ipc.destroy(ctx, log, w.disconnects)
    log.info("process.stopped")
    flag.close()
    return 1 if failed else 0




def main(argv: list[str] | None = None) -> int:
    config, log = start("watcher", argv, shortcuts=proven.WATCHER)   # its lean imports (common/proven.py)
    # Signatures are checked in a child: the Ed25519 library stays out of the long-lived watcher.
    return event_loop.run(run(config, log, check=in_child()))


if __name__ == "__main__":
    sys.exit(main())
