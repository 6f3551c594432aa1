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
import time

import zmq

from common import ipc, wire
from common.config import Config
from common.contract import BUILTIN
from common.log import Logger
from common.runtime import Rejections, SpoolLink, StopFlag, start
from executor import progress_file, scheduler
from executor.clients import Clients
from executor.drain import Drains

STATE_FILE = "executor.json"
PUBLISH_EVERY_S = 1.0


class Executor:
    def __init__(self, config: Config, log: Logger, ctx: zmq.Context) -> None:
        self.config = config
        self.log = log
        rd = config.paths.runtime_dir
        self.sub = ipc.subscriber(ctx, rd, ipc.WATCHER_PUB, ipc.T_NOTICE, ipc.T_CONTRACT)
        self.escalate_sub = ipc.subscriber(ctx, rd, ipc.VERIFIER_PUB, ipc.T_ESCALATE)
        self.pub = ipc.bind(ctx, zmq.PUB, rd, ipc.EXECUTOR_PUB)
        self.spool = SpoolLink(ctx, config, "executor", log)
        self.state_path = os.path.join(rd, STATE_FILE)
        self.rejections = Rejections(log, emit=self.spool.emit)
        self.scheduler = scheduler.build(config, log)
        self.clients = Clients.open(config, log, self.spool.emit)
        # Fields an older executor did not write take the built-in contract's choices.
        records = progress_file.load(self.state_path, BUILTIN, log, scheduler.memo_problem(config.node.scheduler))
        self.drains = Drains(self.scheduler, self.clients, log, self.spool.emit, self._save, self.publish, records,
                             dry_run=config.executor.dry_run)

    def _save(self) -> None:
        progress_file.save(self.state_path, self.drains.records, self.log)

    def publish(self) -> None:
        ipc.send(self.pub, ipc.T_PROGRESS, wire.encode_progress(self.drains.records))

    # -- inputs -------------------------------------------------------------------
    def on_sub_readable(self) -> None:
        for frames in ipc.pending(self.sub):
            try:
                topic, body = ipc.decode(frames)
                if topic == ipc.T_NOTICE:
                    state = wire.decode_notice_state(body, self.config.node.name)
                    for e in state.refused:   # one bad record is refused alone
                        self.rejections.add(ipc.WATCHER_PUB, e)
                    self.drains.active, self.drains.withdrawn = state.active, state.withdrawn
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

    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.close()
        if self.clients is not None:
            self.clients.close()


def main(argv: list[str] | None = None) -> int:
    config, log = start("executor", argv)
    stop = StopFlag()
    ctx = zmq.Context()
    ex = Executor(config, log, ctx)
    drains, clients = ex.drains, ex.clients
    poller = zmq.Poller()
    for sock in (ex.sub, ex.escalate_sub, ex.spool.sock):
        poller.register(sock, zmq.POLLIN)
    for fd in (clients, ex.scheduler):
        if fd is not None:
            poller.register(fd.fileno(), zmq.POLLIN)
    last_publish = 0.0
    while not stop.stopping:
        # Idle, wake once a second (level-triggered state arrives every second anyway); while a
        # drain runs, four times a second so retries and acks are not held back.
        events = dict(poller.poll(250 if drains.busy else 1000))
        if ex.sub in events:
            ex.on_sub_readable()
        if ex.escalate_sub in events:
            ex.on_escalate_readable()
        if ex.spool.sock in events:
            ex.spool.on_readable()
        if clients is not None:
            clients.serve(clients.fileno() in events, time.monotonic())
        now = time.time()
        drains.on_reports(now)
        drains.turn(now)
        ex.spool.tick(now)
        ex.rejections.tick()
        if clients is not None:
            clients.report_errors()
        if now - last_publish >= PUBLISH_EVERY_S:
            ex.publish()
            last_publish = now
    ex.close()
    ex.rejections.tick(force=True)
    if clients is not None:
        clients.report_errors(force=True)
    ex.spool.flush(1.0)
    ctx.destroy(linger=0)
    log.info("process.stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
