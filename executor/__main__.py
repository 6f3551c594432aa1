"""sco-executor: carries out the drain for every active notice.

It listens to the watcher's level-triggered notice state, so a notice that
arrived while the executor was down is acted on as soon as it is back; every
step is idempotent and checked against the cluster's real state, and the
steps already done are kept in a small state file so nothing is announced
twice. Progress is published for the verifier on ``executor.pub``.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

import ujson
import zmq

from common import ipc
from common.config import Config
from common.contract import BUILTIN, Contract
from common.fsutil import write_atomic
from common.log import Logger
from common.notice import Notice, notice_from_dict
from common.runtime import SpoolLink, StopFlag, start
from common.timefmt import format_rfc3339
from executor import kube_drain
from executor.agent_socket import AgentSocketError, AgentSocketServer
from executor.kube import KubeApi, KubeError, NotOwnNode, Unreachable

if TYPE_CHECKING:
    from executor.slurm_drain import SlurmDrain

STATE_FILE = "executor.json"
RECORD_KEYS = ("kind", "state", "steps", "received_at", "policy", "taint_key", "budget")
PUBLISH_EVERY_S = 1.0
RETRY_AFTER_S = 1.0


class Executor:
    def __init__(self, config: Config, log: Logger, ctx: zmq.Context) -> None:
        self.config = config
        self.log = log
        rd = config.paths.runtime_dir
        self.sub = ipc.subscriber(ctx, rd, ipc.WATCHER_PUB, ipc.T_NOTICE, ipc.T_CONTRACT)
        self.pub = ipc.bind(ctx, zmq.PUB, rd, ipc.EXECUTOR_PUB)
        self.spool = SpoolLink(ctx, config, "executor", log)
        self.state_path = os.path.join(rd, STATE_FILE)
        self.progress: dict[str, dict[str, Any]] = self._load()
        self.active: dict[str, Notice] = {}
        self.withdrawn: set[str] = set()
        # The built-in contract until the watcher publishes the signed one (within a second).
        self.contract: Contract = BUILTIN
        self.retry_at: dict[str, float] = {}
        self.bad_messages = 0
        self.api = self._kube_api() if config.node.scheduler == "kubernetes" else None
        self.clients = self._agent_socket()
        # Slurm (issue 6): on a Slurm node executor.slurm_drain does the drain steps instead of Kubernetes.
        self.slurm: SlurmDrain | None = None
        if config.node.scheduler == "slurm":
            from executor import slurm_drain  # imported only where used (subprocess, /proc scanning)

            self.slurm = slurm_drain.build(config, ctx, log, self.spool, self._step, self._save)

    def _agent_socket(self) -> AgentSocketServer | None:
        s = self.config.agent_socket
        try:
            server = AgentSocketServer(s.path, mode=int(s.mode, 8), group=s.group or None,
                                       max_clients=s.max_clients)
            server.listen()
        except (AgentSocketError, OSError, KeyError, ValueError) as e:
            # Without the socket the drain still runs; workloads just are not told.
            self.log.error("agent_socket.unavailable", path=s.path, error=str(e)[:300])
            return None
        return server

    def _kube_api(self) -> KubeApi | None:
        k = self.config.kubernetes
        if not k.api_url:
            self.log.error("kubernetes.unconfigured", detail="kubernetes.api_url is empty")
            return None
        token = ""
        if k.token_file and os.path.exists(k.token_file):
            with open(k.token_file, encoding="utf-8") as f:
                token = f.read(65536).strip()
        return KubeApi(k.api_url, self.config.node.name, token, k.ca_file, k.timeout_s)

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            with open(self.state_path, "rb") as f:
                doc = ujson.loads(f.read(4 << 20))
        except FileNotFoundError:
            return {}
        except (ValueError, OSError) as e:
            self.log.error("state.corrupt", path=self.state_path, error=str(e)[:300])
            return {}
        if not isinstance(doc, dict):
            self.log.error("state.corrupt", path=self.state_path, error="not a JSON object")
            return {}
        # Records the executor cannot read (another version, a hand edit) are set aside, not
        # crashed on: the drain is re-derived from the cluster, so only step timestamps are lost.
        kept = {}
        for nid, rec in doc.items():
            if isinstance(rec, dict) and all(k in rec for k in RECORD_KEYS) and isinstance(rec["steps"], dict):
                kept[nid] = rec
            else:
                self.log.error("state.record_dropped", notice_id=str(nid)[:200])
        return kept

    def _save(self) -> None:
        try:
            write_atomic(self.state_path, ujson.dumps(self.progress).encode())
        except OSError as e:
            self.log.error("state.write_failed", error=str(e))

    # -- inputs -------------------------------------------------------------------
    def on_sub_readable(self) -> None:
        while True:
            try:
                frames = self.sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                topic, body = ipc.decode(frames)
                if topic == ipc.T_NOTICE:
                    self._on_notice_state(body)
                elif topic == ipc.T_CONTRACT:
                    self.contract = Contract.from_payload(body.get("contract"), str(body.get("source", "bundle")))
            except (ipc.BadMessage, ValueError, TypeError) as e:
                self.bad_messages += 1
                self.log.warning("ipc.rejected", socket=ipc.WATCHER_PUB, error=str(e)[:300])

    def _on_notice_state(self, body: dict[str, Any]) -> None:
        active = {}
        for d in body.get("active") or []:
            n = notice_from_dict(d)
            if n.node in (self.config.node.name, "*"):
                active[n.id] = n
        self.active = active
        self.withdrawn = {str(i) for i in body.get("withdrawn") or []}

    # -- the work -------------------------------------------------------------------
    def work(self, now: float) -> None:
        for n in list(self.active.values()):
            self._drain_step(n, now)
            self._tell_clients(n, now)
        for nid in self.withdrawn:
            rec = self.progress.get(nid)
            if self.clients is not None:
                self.clients.withdraw(nid)
            if rec and rec.get("state") != "withdrawn":
                self._undo(nid, rec, now)
        self._collect_acks(now)

    def _tell_clients(self, n: Notice, now: float) -> None:
        """Announce the notice on the agent socket (idempotent: an unchanged notice is not re-sent)."""
        rec = self.progress.get(n.id)
        if self.clients is None or rec is None or rec["state"] == "withdrawn":
            return
        if rec["policy"] != "drain":
            return
        budget = rec["budget"]
        checkpoint_by = min(n.deadline - budget["margin_s"], n.received_at + budget["checkpoint_s"])
        self.clients.announce({"id": n.id, "kind": n.kind, "deadline": n.to_dict()["deadline"],
                               "checkpoint_by": format_rfc3339(checkpoint_by)})
        if "clients_told" not in rec["steps"]:
            told = len(self.clients.clients())
            self._step(n, rec, "clients_told", "drain.clients_told", {"clients": told})

    def _collect_acks(self, now: float) -> None:
        if self.clients is None:
            return
        for ack in self.clients.drain_acks():
            rec = self.progress.get(ack.notice_id)
            data = {"client": ack.name, "pid": ack.pid, "uid": ack.uid, "status": ack.status,
                    "latency_ms": round(ack.latency_s * 1000), "replay": ack.replay}
            if rec is not None:
                rec.setdefault("acks", {})[f"{ack.name}:{ack.pid}"] = {"status": ack.status, "at": now}
                self._save()
            self.log.info("drain.checkpoint_acked", notice_id=ack.notice_id, **data)
            self.spool.emit("drain.checkpoint_acked", ack.notice_id, data, now)

    def _policy(self, kind: str) -> str:
        return self.contract.action_for(kind)

    def _drain_step(self, n: Notice, now: float) -> None:
        rec = self.progress.get(n.id)
        if rec is None:
            # A drain keeps the budget it started with, whatever contract lands meanwhile.
            drain = self.contract.drain
            rec = self.progress[n.id] = {
                "kind": n.kind, "state": "running", "steps": {}, "received_at": n.received_at,
                "remaining": None, "contract_serial": self.contract.serial,
                "taint_key": self.contract.taint_key, "policy": self._policy(n.kind),
                "budget": {"budget_s": drain.budget_s, "checkpoint_s": drain.checkpoint_s,
                           "evict_s": drain.evict_s, "margin_s": drain.margin_s}}
            self.spool.emit("drain.started", n.id, {"kind": n.kind, "policy": self._policy(n.kind)}, now)
            self._save()
        if rec["state"] != "running" or now < self.retry_at.get(n.id, 0.0):
            return
        if self.slurm is not None:  # Slurm (issue 6)
            self.slurm.step(n, rec, now, self.contract.slurm)
            return
        if self.api is None:
            return
        steps = rec["steps"]
        taint_key = rec["taint_key"]
        try:
            if "cordoned" not in steps:
                if self.config.executor.dry_run:
                    self.log.info("drain.dry_run", notice_id=n.id, action="cordon+taint")
                else:
                    kube_drain.cordon(self.api, taint_key, n.kind, n.id, n.to_dict()["deadline"])
                self._step(n, rec, "cordoned", "drain.cordoned", {"taint_key": taint_key})
            if rec["policy"] != "drain":
                rec["state"] = "cordoned_only"
                self._save()
                return
            remaining = kube_drain.remaining_pods(self.api)
            rec["remaining"] = remaining
            if not remaining and "node_empty" not in steps:
                self._step(n, rec, "node_empty", "drain.node_empty", {})
                rec["state"] = "done"
                self._save()
        except (Unreachable, KubeError, NotOwnNode) as e:
            self.retry_at[n.id] = now + RETRY_AFTER_S
            self.log.warning("drain.error", notice_id=n.id, error=str(e)[:300])

    def _step(self, n: Notice, rec: dict[str, Any], step: str, event: str, data: dict[str, Any]) -> None:
        now = time.time()
        rec["steps"][step] = now
        self._save()
        data = dict(data, since_received_ms=round((now - n.received_at) * 1000))
        self.log.info(event, notice_id=n.id, **data)
        self.spool.emit(event, n.id, data, now)
        self.publish()

    def _undo(self, nid: str, rec: dict[str, Any], now: float) -> None:
        if self.slurm is not None:  # Slurm (issue 6): RESUME only the agent's own drain
            self.slurm.undo(nid, rec, now, other_notices=bool(self.active.keys() - {nid}))
            return
        if self.api is None or now < self.retry_at.get(nid, 0.0):
            return
        taint_key = rec.get("taint_key", self.contract.taint_key)
        try:
            if "cordoned" in rec["steps"] and not self.config.executor.dry_run:
                kube_drain.uncordon(self.api, taint_key, nid)
        except (Unreachable, KubeError) as e:
            self.retry_at[nid] = now + RETRY_AFTER_S
            self.log.warning("drain.error", notice_id=nid, error=str(e)[:300])
            return
        rec["state"] = "withdrawn"
        rec["steps"]["uncordoned"] = now
        self._save()
        self.log.info("drain.uncordoned", notice_id=nid)
        self.spool.emit("drain.uncordoned", nid, {}, now)

    def publish(self) -> None:
        ipc.send(self.pub, ipc.T_PROGRESS, {"notices": self.progress})


def main(argv: list[str] | None = None) -> int:
    config, log = start("executor", argv)
    stop = StopFlag()
    ctx = zmq.Context()
    ex = Executor(config, log, ctx)
    poller = zmq.Poller()
    poller.register(ex.sub, zmq.POLLIN)
    poller.register(ex.spool.sock, zmq.POLLIN)
    if ex.clients is not None:
        poller.register(ex.clients.fileno(), zmq.POLLIN)
    last_publish = 0.0
    while not stop.stopping:
        # Idle, wake once a second (level-triggered state arrives every second anyway); while a
        # drain runs, four times a second so retries and acks are not held back.
        busy = any(r.get("state") == "running" for r in ex.progress.values())
        events = dict(poller.poll(250 if busy else 1000))
        if ex.sub in events:
            ex.on_sub_readable()
        if ex.spool.sock in events:
            ex.spool.on_readable()
        if ex.clients is not None:
            mono = time.monotonic()
            if ex.clients.fileno() in events:
                ex.clients.process(mono)
            ex.clients.tick(mono)
        now = time.time()
        ex.work(now)
        ex.spool.tick(now)
        if now - last_publish >= PUBLISH_EVERY_S:
            ex.publish()
            last_publish = now
    if ex.clients is not None:
        ex.clients.close()
    ex.spool.flush(1.0)
    ctx.destroy(linger=0)
    log.info("process.stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
