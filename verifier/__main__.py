"""sco-verifier: owns the deadline clock of every notice and gives exactly one verdict.

It listens to the watcher (which notices are active) and the executor (what
the drain has done, what is still on the node) and judges each notice
``done`` or ``overrun`` (verifier/core.py); at the contract's cutoffs it
publishes level-triggered ``escalate`` state for the executor. Verdicts, and
the events announcing them, are persisted before they are sent, and an event
stays in the state file until the spool has acknowledged it: a verifier killed
at any moment neither forgets a verdict nor gives a second one. Counters are
kept in the same file and rendered to a Prometheus textfile (verifier/metrics.py).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

import zmq

from common import clock, ipc, notice_state, progress, state_file, supervise, wire
from common.clock import Moment, MonoTime
from common.config import Config
from common.contract import BUILTIN, Contract
from common.events import is_event_type
from common.fsutil import write_atomic
from common.log import Logger
from common.loop import Loop
from common.notice import Notice
from common.runtime import Rejections, SpoolLink, StopFlag, start
from common.verdict import encode_verdict_news
from verifier import core, metrics
from verifier.judge import finished_at
from verifier.scheduler_read import Observer, reader_for

STATE_FILE = "verdicts.json"
# Where the state goes while the state dir refuses writes (a full disk): the runtime dir is another
# filesystem (tmpfs) and outlives a restart of the verifier, so a verdict announced while the disk
# was full is still known to the next verifier, which would otherwise judge the notice again.
FALLBACK_FILE = "verdicts.json"
MAX_STATE = 8 << 20
PUBLISH_EVERY_S = 1.0
# After a start, judge once the watcher, the contract and the executor have all
# been heard -- or after this long without them (each re-announces every second),
# so a restarted verifier never judges on half the picture.
SETTLE_S = 3.0


class Verifier:
    def __init__(self, config: Config, log: Logger, ctx: ipc.Context) -> None:
        self.config = config
        self.log = log
        rd = config.paths.runtime_dir
        self.notices_sub = ipc.subscriber(ctx, rd, ipc.WATCHER_PUB, ipc.T_NOTICE, ipc.T_CONTRACT)
        self.progress_sub = ipc.subscriber(ctx, rd, ipc.EXECUTOR_PUB, ipc.T_PROGRESS)
        self.pub = ipc.bind(ctx, zmq.PUB, rd, ipc.VERIFIER_PUB)
        self.disconnects = ipc.Disconnects(rd, {ipc.WATCHER_PUB: self.notices_sub, ipc.EXECUTOR_PUB: self.progress_sub})
        self.spool = SpoolLink(ctx, config, "verifier", log)
        os.makedirs(config.paths.state_dir, exist_ok=True)
        self.state_path = os.path.join(config.paths.state_dir, STATE_FILE)
        self.fallback_path = os.path.join(rd, FALLBACK_FILE)
        self.save_failing = os.path.exists(self.fallback_path)   # removed at the next good save
        self.state, damaged = core.load(self._load())
        self.started = clock.mono()   # SETTLE_S: an interval
        self.heard: set[bytes] = set()
        self.active: dict[str, Notice] = {}
        self.published_at = MonoTime(float("-inf"))
        self.mono = clock.mono()   # as of the last turn
        self.done_heard: dict[str, MonoTime] = {}   # id -> when its record first said finished
        self.withdrawn: frozenset[str] = frozenset()
        self.arrivals: dict[str, dict[str, float]] = {}
        self.progress: dict[str, wire.DrainRecord] = {}
        self.progress_at = 0.0
        # The built-in contract until the watcher's is heard: it is what the executor drains on
        # then too, and it only times a notice until the executor's drain record says its budget.
        self.contract: Contract = BUILTIN
        self.move_step = "requeue" if config.node.scheduler == "slurm" else "evict"
        self.rejections = Rejections(log, emit=self.spool.emit)
        # A damaged verdict is kept (its notice stays judged) or dropped, and said once, here.
        for nid, why in damaged.items():
            self.rejections.add(STATE_FILE, wire.BadRecord(f"verdict of {nid[:64]!r}: {why}"))
        self.rejections.counted = self._count_own
        self.metrics_path = config.metrics.textfile
        self.metrics_dirty = True
        self.metrics_failed = False
        # Its own read of the scheduler (read-only, in a thread): "done" needs it to agree.
        make_reader = reader_for(config)
        self.observer = Observer(make_reader) if make_reader is not None else None
        # Events persisted but not yet acknowledged by the spool go out again (same ids: deduped).
        for eid, ev in list(self.state["unacked"].items()):
            if ev.get("event_id") == eid and isinstance(ev.get("type"), str):
                self.spool.outbox.pending[eid] = (0.0, ev)
            else:
                del self.state["unacked"][eid]

    # -- persistence ----------------------------------------------------------------
    def _load(self) -> Any:
        """The newer (by generation) of the state file and its fallback copy, if either is readable."""
        docs = [d for d in (self._read(self.state_path), self._read(self.fallback_path)) if isinstance(d, dict)]
        return max(docs, key=lambda d: core.as_number(d.get("generation")), default=None)

    def _read(self, path: str) -> Any:
        return state_file.load(path, MAX_STATE, self.log)

    def _save(self) -> None:
        self.state["generation"] += 1
        # Logged once per failing spell; the fallback's failures every time (announced anyway:
        # a verdict no disk could keep is still a verdict).
        doc = core.to_json(self.state)
        if not state_file.save(self.state_path, doc, self.log, report=not self.save_failing):
            self.save_failing = True
            state_file.save(self.fallback_path, doc, self.log)
            return
        if self.save_failing:
            self.save_failing = False
            self.log.info("state.write_recovered", path=self.state_path)
            try:
                os.unlink(self.fallback_path)
            except OSError:
                pass   # a stale copy is harmless: its generation is lower

    # -- inputs ---------------------------------------------------------------------
    def on_readable(self, sock: ipc.Socket) -> None:
        for frames in ipc.pending(sock):
            try:
                topic, body = ipc.decode(frames)
                if topic == ipc.T_NOTICE:
                    self._on_notices(body)
                elif topic == ipc.T_CONTRACT:
                    # {"source", "contract": {...}} as the watcher publishes it (watcher.contract_keeper).
                    self.contract = wire.decode_contract(body)
                elif topic == ipc.T_PROGRESS:
                    self.progress, refused = progress.decode_progress(body)
                    if refused:   # counted once per message; the good records next to them still count
                        nid, why = next(iter(refused.items()))
                        self.rejections.add(ipc.EXECUTOR_PUB, wire.BadRecord(
                            f"{len(refused)} drain record(s) refused, e.g. {nid[:64]!r}: {why}"))
                    self.progress_at = time.time()
                    self._heard_done()
                self.heard.add(topic)
            except (ipc.BadMessage, ValueError, TypeError) as e:
                self.rejections.add(ipc.EXECUTOR_PUB if sock is self.progress_sub else ipc.WATCHER_PUB, e)

    def _count_own(self, reason: str, n: int) -> None:
        """The verifier's own refusals (a bad message, a send refused, a dropped connection) in the
        metrics textfile, next to the watcher's: sco_agent_rejections_total{what="ipc"}."""
        metrics.inc(self.state["metrics"], "sco_agent_rejections_total", ("ipc", metrics.reason_label(reason)), n)
        self.metrics_dirty = True

    @property
    def bad_messages(self) -> int:
        return self.rejections.total

    def _on_notices(self, body: dict[str, Any]) -> None:
        state = notice_state.decode_notice_state(body, self.config.node.name)
        for e in state.refused:   # one bad record is refused alone
            self.rejections.add(ipc.WATCHER_PUB, e)
        if len(state.active) != len(self.active):
            self.metrics_dirty = True
        # The message names only the newest withdrawn ids: a clock whose notice is not active was
        # withdrawn too, however long ago (notice_state.NoticeState.gone).
        self.active, self.arrivals = state.active, state.arrivals
        self.withdrawn = state.gone({nid: core.as_number(c.get("received_at")) for nid, c in self.state["clocks"].items()})
        if core.count_rejections(self.state, state.started_at, state.counters):
            self._save()
            self.metrics_dirty = True

    def on_acks(self) -> None:
        self.spool.on_readable()
        done = [eid for eid in self.state["unacked"] if eid not in self.spool.outbox.pending]
        if done:
            for eid in done:
                del self.state["unacked"][eid]
            self._save()

    # -- the work -------------------------------------------------------------------
    def _heard_done(self) -> None:
        """Note when (monotonic) each drain was first heard finished: VERIFY_WAIT_S counts from it."""
        now = clock.mono()
        self.done_heard = {nid: self.done_heard.get(nid, now) for nid, rec in self.progress.items()
                           if finished_at(rec, self.progress_at) is not None}

    def ready(self, mono: MonoTime) -> bool:
        if ipc.T_NOTICE not in self.heard:
            return False
        return {ipc.T_CONTRACT, ipc.T_PROGRESS} <= self.heard or mono - self.started >= SETTLE_S

    def view(self) -> core.View:
        return core.View(active=self.active, withdrawn=self.withdrawn, progress=self.progress,
                         progress_at=self.progress_at, budget=wire.Budget.of(self.contract.drain),
                         move_step=self.move_step, arrivals=self.arrivals,
                         seen=self.observer.latest if self.observer is not None else None,
                         mono=self.mono, done_heard=dict(self.done_heard))

    def check(self, now: float) -> None:   # now: the wall clock (deadlines); self.mono beside it
        if self.observer is not None:
            self.observer.want(core.open_notices(self.state, self.active))
        if not self.ready(self.mono):
            return
        emits, changed = core.advance(self.state, self.view(), now)
        events = []
        for e in emits:
            self.log.info(e.type, **{**e.data, "notice_id": e.notice_id})
            if is_event_type(e.type):
                ev = self.spool.outbox.add(e.type, e.notice_id, e.data, now)
                self.state["unacked"][ev["event_id"]] = ev
                events.append(ev)
        if changed or events:
            # Persist first: a crash after this line re-sends, never re-judges.
            self._save()
            self.metrics_dirty = True
        for ev in events:
            self.spool.log_emitted(ev)
            ipc.send(self.spool.sock, ipc.T_EVENT, ev, self.refused)
        if emits:
            self.publish()

    def publish(self) -> None:
        ipc.send(self.pub, ipc.T_ESCALATE, wire.encode_escalations(core.escalations(self.state, self.active)),
                 self.refused)
        # The watcher acknowledges an Azure event only once its verdict is in (volumes included).
        ipc.send(self.pub, ipc.T_VERDICT, encode_verdict_news(self.state["verdicts"], self.active), self.refused)

    def refused(self, e: ipc.TooLarge) -> None:
        """A message over what its receivers accept was not sent: counted and reported."""
        self.rejections.add(ipc.VERIFIER_PUB if e.topic in (ipc.T_ESCALATE, ipc.T_VERDICT) else ipc.SPOOL_INTAKE, e)

    def write_metrics(self) -> None:
        if not self.metrics_path or not self.metrics_dirty:
            return
        self.metrics_dirty = False
        text = metrics.render(self.state["metrics"], {"sco_agent_notices_active": len(self.active)})
        try:
            # 0644: node_exporter usually runs as its own user.
            write_atomic(self.metrics_path, text.encode(), mode=0o644)
            self.metrics_failed = False
        except OSError as e:
            if not self.metrics_failed:
                self.log.error("metrics.write_failed", path=self.metrics_path, error=str(e)[:300])
            self.metrics_failed = True

    def turn(self, at: Moment) -> None:
        """The housekeeping after each poll: judge, say restarts of the reader, resend, report refusals,
        publish, metrics."""
        now, self.mono = at.wall, at.mono
        self.check(now)
        if self.observer is not None and self.observer.worker is not None:
            supervise.report(self.observer.worker, self.log, self.spool.emit)
        self.spool.tick()
        self.rejections.tick()
        if at.mono - self.published_at >= PUBLISH_EVERY_S:
            self.publish()
            self.published_at = at.mono
        self.write_metrics()


def main(argv: list[str] | None = None) -> int:
    config, log = start("verifier", argv)
    stop = StopFlag()
    ctx = zmq.Context()
    v = Verifier(config, log, ctx)
    loop = Loop()
    loop.on(v.notices_sub, lambda: v.on_readable(v.notices_sub))
    loop.on(v.progress_sub, lambda: v.on_readable(v.progress_sub))
    loop.on(v.spool.sock, v.on_acks)
    for mon in v.disconnects.fds():
        loop.on(mon, lambda: v.rejections.count_disconnects(v.disconnects))
    # Idle, a turn a second; four while a notice is active, so a deadline is judged on time.
    loop.run(stop, lambda ready: v.turn(clock.moment()), lambda: 250 if v.active else 1000)
    if v.observer is not None:
        v.observer.stop()
    v.rejections.tick(force=True)
    v.spool.flush(1.0)
    v.on_acks()
    ipc.destroy(ctx, log, v.disconnects)
    log.info("process.stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
