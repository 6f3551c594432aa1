"""sco-executor: carries out the drain for every active notice.

It listens to the watcher's level-triggered notice state, so a notice that
arrived while the executor was down is acted on as soon as it is back; every
step is idempotent and checked against the cluster's real state, and the
steps already done (and the pods already evicted) are kept in a small state
file so nothing is done or announced twice. Progress is published for the
verifier on ``executor.pub``; the verifier's escalations come back on
``verifier.pub``.

This is the shell: sockets, the state file, the loop. The recipe is the drain
core's (``executor.drain``); the node's scheduler (``executor.scheduler``: the
Kubernetes or Slurm sub-package) runs its blocking calls on its own threads and
reports back through a pipe this loop polls, so the loop never blocks.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import zmq

from common import clock, ipc, notice_state, progress, state_file, wire
from common.clock import Moment
from common.config import Config
from common.contract import BUILTIN
from common.events import EventType
from common.log import Logger
from common.loop import Loop
from common.runtime import Rejections, SpoolLink, StopFlag, start
from executor import progress_file, scheduler
from executor.clients import Clients
from executor.drain import Drains

STATE_FILE = "executor.json"
PUBLISH_EVERY_S = 1.0


class Executor:
    def __init__(self, config: Config, log: Logger, ctx: ipc.Context) -> None:
        self.config = config
        self.log = log
        rd = config.paths.runtime_dir
        self.sub = ipc.subscriber(ctx, rd, ipc.WATCHER_PUB, ipc.T_NOTICE, ipc.T_CONTRACT)
        self.escalate_sub = ipc.subscriber(ctx, rd, ipc.VERIFIER_PUB, ipc.T_ESCALATE)
        self.pub = ipc.bind(ctx, zmq.PUB, rd, ipc.EXECUTOR_PUB)
        self.disconnects = ipc.Disconnects(rd, {ipc.WATCHER_PUB: self.sub, ipc.VERIFIER_PUB: self.escalate_sub})
        self.spool = SpoolLink(ctx, config, "executor", log)
        # The state dir: a unit restart removes the runtime dir, and the drain must go on where it was.
        self.state_path = os.path.join(config.paths.state_dir, STATE_FILE)
        self.state = state_file.Kept(self.state_path, os.path.join(rd, STATE_FILE), progress_file.MAX_FILE, log)
        self.rejections = Rejections(log, emit=self.spool.emit)
        self.scheduler = scheduler.build(config, log)
        self.clients = Clients.open(config, log, self.spool.emit)
        # Fields an older executor did not write take the built-in contract's choices.
        records = progress_file.load(self.state, BUILTIN, log, scheduler.memo_problem(config.node.scheduler))
        self.drains = Drains(self.scheduler, self.clients, self, records, dry_run=config.executor.dry_run)
        self.published_at = float("-inf")   # MonoTime: publishing is paced, an interval

    # -- the drain core's Shell ---------------------------------------------------
    def emit(self, type: EventType, notice_id: str, data: dict[str, Any], now: float) -> object:
        return self.spool.emit(type, notice_id, data, now)

    def save(self) -> bool:
        progress_file.prune(self.drains.records, self.drains.active.keys(), self.drains.withdrawn)
        return progress_file.save(self.state, self.drains.records)

    def publish(self) -> None:
        body = progress.encode_progress(self.drains.records, self.drains.active.keys())
        ipc.send(self.pub, ipc.T_PROGRESS, body, lambda e: self.rejections.add(ipc.EXECUTOR_PUB, e))

    # -- inputs -------------------------------------------------------------------
    def on_sub_readable(self) -> None:
        for frames in ipc.pending(self.sub):
            try:
                topic, body = ipc.decode(frames)
                if topic == ipc.T_NOTICE:
                    state = notice_state.decode_notice_state(body, self.config.node.name)
                    for e in state.refused:   # one bad record is refused alone
                        self.rejections.add(ipc.WATCHER_PUB, e)
                    # The message names only the newest withdrawn ids: a drain whose notice is not
                    # active was withdrawn too, however long ago (notice_state.NoticeState.gone).
                    self.drains.active = state.active
                    self.drains.withdrawn = state.gone({nid: r.received_at for nid, r in self.drains.records.items()})
                elif topic == ipc.T_CONTRACT:
                    self.drains.contract = wire.decode_contract(body)
                    self.drains.contract_heard = True
            except (ipc.BadMessage, ValueError, TypeError) as e:
                self.rejections.add(ipc.WATCHER_PUB, e)

    def on_escalate_readable(self) -> None:
        for frames in ipc.pending(self.escalate_sub):
            try:
                _, body = ipc.decode(frames)
                self.drains.levels = wire.decode_escalations(body)
            except (ipc.BadMessage, ValueError, TypeError, AttributeError) as e:
                self.rejections.add(ipc.VERIFIER_PUB, e)

    @property
    def bad_messages(self) -> int:
        return self.rejections.total

    # -- the loop -----------------------------------------------------------------
    def register(self, loop: Loop) -> None:
        loop.on(self.sub, self.on_sub_readable)
        loop.on(self.escalate_sub, self.on_escalate_readable)
        for mon in self.disconnects.fds():
            loop.on(mon, lambda: self.rejections.count_disconnects(self.disconnects))
        loop.on(self.spool.sock, self.spool.on_readable)
        # The agent socket is served every turn (readable or not); the scheduler's fd only wakes us.
        for fd in (self.clients, self.scheduler):
            if fd is not None:
                loop.on(fd.fileno())

    def timeout_ms(self) -> int:
        # Idle, wake once a second (level-triggered state arrives every second anyway); while a
        # drain runs, four times a second so retries and acks are not held back.
        return 250 if self.drains.busy else 1000

    def turn(self, ready: set[Any], at: Moment) -> None:
        """One turn of the loop, after the handlers of what was readable: the drain core's turn."""
        now = at.wall
        if self.clients is not None:
            self.clients.serve(self.clients.fileno() in ready, at.mono)
        self.drains.on_reports(now, at.mono)
        self.drains.turn(now, at.mono)
        self.spool.tick()
        self.rejections.tick()
        if self.clients is not None:
            self.clients.report_errors()
        if at.mono - self.published_at >= PUBLISH_EVERY_S:
            self.publish()
            self.published_at = at.mono

    def close(self) -> None:
        """Stop the scheduler's threads and the agent socket, say what is left to say."""
        if self.scheduler is not None:
            self.scheduler.close()
        if self.clients is not None:
            self.clients.close()
            self.clients.report_errors(force=True)
        self.rejections.tick(force=True)
        self.spool.flush(1.0)


def main(argv: list[str] | None = None) -> int:
    config, log = start("executor", argv)
    stop = StopFlag()
    ctx = zmq.Context()
    ex = Executor(config, log, ctx)
    loop = Loop()
    ex.register(loop)
    loop.run(stop, lambda ready: ex.turn(ready, clock.moment()), ex.timeout_ms)
    ex.close()
    ipc.destroy(ctx, log, ex.disconnects)
    log.info("process.stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
