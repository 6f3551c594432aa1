"""sco-verifier: owns the deadline clock of every notice and gives exactly one verdict.

It listens to the watcher (which notices are active) and the executor (what
the drain has done) and judges each notice ``done`` or ``overrun``. Verdicts
are persisted before they are announced, so a verifier killed at any moment
neither forgets a verdict nor gives a second one.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

import ujson
import zmq

from common import ipc
from common.config import Config
from common.fsutil import write_atomic
from common.log import Logger
from common.notice import Notice, notice_from_dict
from common.runtime import SpoolLink, StopFlag, start
from verifier.judge import DEFAULT_MARGIN_S, cutoff, judge

STATE_FILE = "verdicts.json"
PUBLISH_EVERY_S = 1.0


class Verifier:
    def __init__(self, config: Config, log: Logger, ctx: zmq.Context) -> None:
        self.config = config
        self.log = log
        rd = config.paths.runtime_dir
        self.notices_sub = ipc.subscriber(ctx, rd, ipc.WATCHER_PUB, ipc.T_NOTICE, ipc.T_CONTRACT)
        self.progress_sub = ipc.subscriber(ctx, rd, ipc.EXECUTOR_PUB, ipc.T_PROGRESS)
        self.pub = ipc.bind(ctx, zmq.PUB, rd, ipc.VERIFIER_PUB)
        self.spool = SpoolLink(ctx, config, "verifier", log)
        os.makedirs(config.paths.state_dir, exist_ok=True)
        self.state_path = os.path.join(config.paths.state_dir, STATE_FILE)
        self.state = self._load()      # {"verdicts": {id: {...}}, "clocks": {id: cutoff}}
        self.active: dict[str, Notice] = {}
        self.progress: dict[str, Any] = {}
        self.contract: dict[str, Any] = {}
        self.bad_messages = 0

    def _load(self) -> dict[str, Any]:
        try:
            with open(self.state_path, "rb") as f:
                doc = ujson.loads(f.read(4 << 20))
            if isinstance(doc, dict):
                doc.setdefault("verdicts", {})
                doc.setdefault("clocks", {})
                return doc
        except FileNotFoundError:
            pass
        except (ValueError, OSError) as e:
            self.log.error("state.corrupt", path=self.state_path, error=str(e)[:300])
        return {"verdicts": {}, "clocks": {}}

    def _save(self) -> None:
        write_atomic(self.state_path, ujson.dumps(self.state).encode())

    def _drain(self, sock: zmq.Socket) -> None:
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                topic, body = ipc.decode(frames)
                if topic == ipc.T_NOTICE:
                    self.active = {n.id: n for n in (notice_from_dict(d) for d in body.get("active") or [])}
                elif topic == ipc.T_CONTRACT:
                    self.contract = body
                elif topic == ipc.T_PROGRESS:
                    notices = body.get("notices")
                    if isinstance(notices, dict):
                        self.progress = notices
            except (ipc.BadMessage, ValueError, TypeError) as e:
                self.bad_messages += 1
                self.log.warning("ipc.rejected", error=str(e)[:300])

    def margin(self) -> float:
        drain = (self.contract.get("contract") or {}).get("drain") or {}
        return float(drain.get("margin_s", DEFAULT_MARGIN_S))

    def check(self, now: float) -> None:
        margin = self.margin()
        for n in self.active.values():
            if n.id in self.state["verdicts"]:
                continue
            if n.id not in self.state["clocks"]:
                self.state["clocks"][n.id] = cutoff(n, margin)
                self._save()
                data = {"deadline": n.to_dict()["deadline"], "margin_s": margin,
                        "seconds_left": round(n.deadline - now, 3)}
                self.log.info("verifier.clock_started", notice_id=n.id, **data)
                self.spool.emit("verifier.clock_started", n.id, data, now)
            verdict = judge(n, self.progress.get(n.id), margin, now)
            if verdict is None:
                continue
            # Persist first: a crash after this line re-announces, never re-judges.
            self.state["verdicts"][n.id] = verdict.to_dict()
            self._save()
            data = verdict.to_dict()
            data["timeline_ms"] = self.timeline(n, self.progress.get(n.id))
            event = f"drain.{verdict.outcome}"
            self.log.info(event, **data)
            self.spool.emit(event, n.id, data, now)
            self.publish()

    @staticmethod
    def timeline(n: Notice, progress: dict[str, Any] | None) -> dict[str, int]:
        """Offsets in ms from the provider's issue time."""
        out = {"received": round((n.received_at - n.issued_at) * 1000)}
        for step, at in ((progress or {}).get("steps") or {}).items():
            out[step] = round((at - n.issued_at) * 1000)
        return out

    def publish(self) -> None:
        ipc.send(self.pub, ipc.T_VERDICT, {"verdicts": self.state["verdicts"]})


def main(argv: list[str] | None = None) -> int:
    config, log = start("verifier", argv)
    stop = StopFlag()
    ctx = zmq.Context()
    v = Verifier(config, log, ctx)
    poller = zmq.Poller()
    for s in (v.notices_sub, v.progress_sub, v.spool.sock):
        poller.register(s, zmq.POLLIN)
    last_publish = 0.0
    while not stop.stopping:
        events = dict(poller.poll(250 if v.active else 1000))
        if v.notices_sub in events:
            v._drain(v.notices_sub)
        if v.progress_sub in events:
            v._drain(v.progress_sub)
        if v.spool.sock in events:
            v.spool.on_readable()
        now = time.time()
        v.check(now)
        v.spool.tick(now)
        if now - last_publish >= PUBLISH_EVERY_S:
            v.publish()
            last_publish = now
    v.spool.flush(1.0)
    ctx.destroy(linger=0)
    log.info("process.stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
