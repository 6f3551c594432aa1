"""sco-executor: carries out the drain for every active notice.

It listens to the watcher's level-triggered notice state, so a notice that
arrived while the executor was down is acted on as soon as it is back; every
step is idempotent and checked against the cluster's real state, and the
steps already done (and the pods already evicted) are kept in a small state
file so nothing is done or announced twice. Progress is published for the
verifier on ``executor.pub``; the verifier's escalations come back on
``verifier.pub``.

The loop never blocks on the API server: the Kubernetes drain runs in threads
(``kube_driver``, ``kube_runner``) that report back through a queue, and this
loop applies their reports to the progress records.
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
from common.runtime import Rejections, SpoolLink, StopFlag, start
from common.timefmt import format_rfc3339
from executor import escalation, progress_file, workload_map
from executor.agent_socket import AgentSocketError, AgentSocketServer
from executor.drain_plan import deadlines
from executor.eviction_book import Inputs
from executor.kube_driver import KubeDriver, api_factory
from executor.kube_runner import Report

if TYPE_CHECKING:
    from executor.slurm_drain import SlurmDrain

STATE_FILE = "executor.json"
TELL_CLIENTS_AFTER_S = 2.0   # tell clients at the latest this long after receipt, cordoned or not
PUBLISH_EVERY_S = 1.0
ESCALATED = ("evict_over", "final")   # verifier levels at which PDB-blocked pods are escalated
END_STATES = ("done", "cordoned_only", "ended")
SAVE_EVERY_S = 0.2


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
        # The built-in contract until the watcher publishes the signed one (within a second).
        self.contract: Contract = BUILTIN
        # A new drain starts only once the watcher's contract has been heard: it sends the contract
        # before the notice in every announcement, so this costs nothing but closes the window in
        # which a restarted executor would start a drain on the built-in budget.
        self.contract_heard = False
        self.unsaved, self.saved_at = False, 0.0
        self.progress: dict[str, dict[str, Any]] = progress_file.load(self.state_path, self.contract, log)
        self.active: dict[str, Notice] = {}
        self.withdrawn: set[str] = set()
        self.escalated: dict[str, str] = {}    # notice id -> the verifier's level
        self.rejections = Rejections(log, emit=self.spool.emit)
        # The agent socket counts what it refuses (executor.socket_protocol.ERROR_CODES); these
        # turn its counters into socket.rejected log lines and events.
        self.socket_rejections = Rejections(log, what="socket", emit=self.spool.emit)
        self.socket_errors_seen: dict[str, int] = {}
        self.kube = self._kube_driver() if config.node.scheduler == "kubernetes" else None
        self.clients = self._agent_socket()
        self.client_pods: dict[int, str | None] = {}   # agent-socket client -> its pod UID
        # On a Slurm node executor.slurm_drain does the drain steps instead of Kubernetes.
        self.slurm: SlurmDrain | None = None
        if config.node.scheduler == "slurm":
            from executor import slurm_drain  # imported only where used (subprocess, /proc scanning)

            def step(n: Notice, rec: dict[str, Any], name: str, event: str, data: dict[str, Any]) -> None:
                self._step(n.id, rec, name, event, data, time.time())

            self.slurm = slurm_drain.build(config, log, self.spool, step, self._save,
                                           lambda nid: self.escalated.get(nid))

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

    def _kube_driver(self) -> KubeDriver | None:
        make_api = api_factory(self.config)
        if make_api is None:
            self.log.error("kubernetes.unconfigured", detail="kubernetes.api_url is empty")
            return None
        return KubeDriver(self.config, make_api)

    def _save(self) -> None:
        self.unsaved, self.saved_at = False, time.time()
        try:
            write_atomic(self.state_path, ujson.dumps(self.progress).encode())
        except OSError as e:
            self.log.error("state.write_failed", error=str(e))

    # -- inputs -------------------------------------------------------------------
    def on_sub_readable(self) -> None:
        for frames in ipc.pending(self.sub):
            try:
                topic, body = ipc.decode(frames)
                if topic == ipc.T_NOTICE:
                    self._on_notice_state(body)
                elif topic == ipc.T_CONTRACT:
                    self.contract = Contract.from_payload(body.get("contract"), str(body.get("source", "bundle")))
                    self.contract_heard = True
            except (ipc.BadMessage, ValueError, TypeError) as e:
                self.rejections.add(ipc.WATCHER_PUB, e)

    def on_escalate_readable(self) -> None:
        for frames in ipc.pending(self.escalate_sub):
            try:
                _, body = ipc.decode(frames)
                self.escalated = escalation.parse(body)
            except (ipc.BadMessage, ValueError, TypeError, AttributeError) as e:
                self.rejections.add(ipc.VERIFIER_PUB, e)

    @property
    def bad_messages(self) -> int:
        return self.rejections.total

    def report_socket_errors(self) -> None:
        """New agent-socket refusals since the last call, counted by their error code."""
        if self.clients is None:
            return
        for key, n in self.clients.stats().items():
            if key.startswith("error.") or key == "acks_dropped":
                delta = n - self.socket_errors_seen.get(key, 0)
                if delta > 0:
                    self.socket_errors_seen[key] = n
                    self.socket_rejections.count(self.config.agent_socket.path, key.removeprefix("error."),
                                                 "agent socket client refused", delta)
        self.socket_rejections.tick()

    def _on_notice_state(self, body: dict[str, Any]) -> None:
        raw, withdrawn = body.get("active") or [], body.get("withdrawn") or []
        if not isinstance(raw, list) or not isinstance(withdrawn, list):
            raise ipc.BadMessage("notice state: 'active' and 'withdrawn' must be lists")
        active = {}
        for d in raw:
            # One bad record is refused alone: it must not hide the good notices next to it.
            try:
                n = notice_from_dict(d)
            except ValueError as e:
                self.rejections.add(ipc.WATCHER_PUB, e)
                continue
            if n.node in (self.config.node.name, "*"):
                active[n.id] = n
        self.active = active
        self.withdrawn = {str(i) for i in withdrawn}

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
                self._undo(nid, rec)
        self._collect_acks(now)

    def _checkpoint_by(self, n: Notice, rec: dict[str, Any]) -> float:
        b = rec["budget"]
        return deadlines(rec["received_at"], n.deadline, b["checkpoint_s"], b["evict_s"], b["margin_s"]).checkpoint_by

    def _tell_clients(self, n: Notice, now: float) -> None:
        """Announce the notice on the agent socket (idempotent: an unchanged notice is not re-sent)."""
        rec = self.progress.get(n.id)
        if self.clients is None or rec is None or rec["state"] == "withdrawn":
            return
        if rec["policy"] != "drain":
            return
        steps = rec["steps"]
        # Cordon first, so nothing new lands while workloads checkpoint; but never let a slow or
        # unreachable scheduler keep the workloads from hearing the notice for long.
        if ("cordoned" not in steps and "fallback" not in steps
                and now - rec["received_at"] < TELL_CLIENTS_AFTER_S):
            return
        message = {"id": n.id, "kind": n.kind, "deadline": n.to_dict()["deadline"],
                   "checkpoint_by": format_rfc3339(self._checkpoint_by(n, rec))}
        if self.config.executor.dry_run:
            # Workloads would checkpoint (and maybe stop) on a notice: a dry run must not tell them.
            if "clients_told" not in rec["steps"]:
                self.log.info("drain.dry_run", notice_id=n.id, action="tell_clients",
                              clients=len(self.clients.clients()))
                self.spool.emit("drain.dry_run", n.id, {"action": "tell_clients",
                                                         "clients": len(self.clients.clients())}, now)
        else:
            self.clients.announce(message)
        if "clients_told" not in rec["steps"]:
            told = len(self.clients.clients())
            self._step(n.id, rec, "clients_told", "drain.clients_told", {"clients": told}, now)

    def _pod_of_client(self, client: int, pid: int) -> str | None:
        if client not in self.client_pods:
            self.client_pods[client] = workload_map.pod_uid_of_pid(pid)
        return self.client_pods[client]

    def _inputs(self, n: Notice) -> Inputs:
        """What the drain needs from this loop: which pods still checkpoint, and the escalation."""
        pairs = []
        if self.clients is not None:
            infos = self.clients.clients()
            live = {c.client for c in infos}
            self.client_pods = {k: v for k, v in self.client_pods.items() if k in live}
            pairs = [(self._pod_of_client(c.client, c.pid), c.notice_id == n.id and c.acked is not None)
                     for c in infos]
        held, hold_all = workload_map.holds(pairs)
        return Inputs(held=held, hold_all=hold_all, escalated=self.escalated.get(n.id) in ESCALATED)

    def _collect_acks(self, now: float) -> None:
        if self.clients is None:
            return
        for ack in self.clients.drain_acks():
            rec = self.progress.get(ack.notice_id)
            data = {"client": ack.name, "pid": ack.pid, "uid": ack.uid, "status": ack.status,
                    "latency_ms": round(ack.latency_s * 1000), "replay": ack.replay,
                    "pod_uid": self._pod_of_client(ack.client, ack.pid)}
            if rec is not None:
                rec.setdefault("acks", {})[f"{ack.name}:{ack.pid}"] = {"status": ack.status, "at": now}
                self._save()
            self.log.info("drain.checkpoint_acked", notice_id=ack.notice_id, **data)
            self.spool.emit("drain.checkpoint_acked", ack.notice_id, data, now)

    def _policy(self, kind: str) -> str:
        return self.contract.action_for(kind)

    def _drain_step(self, n: Notice, now: float) -> None:
        rec = self.progress.get(n.id)
        if rec is None and not self.contract_heard:
            return
        if rec is None:
            # A drain keeps the budget and choices it started with, whatever contract lands meanwhile.
            drain = self.contract.drain
            rec = self.progress[n.id] = progress_file.complete({
                "kind": n.kind, "state": "running", "steps": {}, "received_at": n.received_at,
                "remaining": None, "contract_serial": self.contract.serial,
                "taint_key": self.contract.taint_key, "policy": self._policy(n.kind),
                "budget": {"budget_s": drain.budget_s, "checkpoint_s": drain.checkpoint_s,
                           "evict_s": drain.evict_s, "margin_s": drain.margin_s}}, self.contract)
            # Saved before it is announced: an executor killed in between must not start (and
            # announce) the same drain again.
            self._save()
            self.spool.emit("drain.started", n.id, {"kind": n.kind, "policy": self._policy(n.kind)}, now)
        if rec["state"] != "running":
            return
        if self.slurm is not None:
            self.slurm.step(n, rec, now, self.contract.slurm)
        elif self.kube is not None:
            self.kube.drain(n, rec, self._inputs(n), now)

    def _step(self, nid: str, rec: dict[str, Any], step: str, event: str, data: dict[str, Any],
              now: float) -> None:
        rec["steps"][step] = now
        self._save()
        data = dict(data, since_received_ms=round((now - rec["received_at"]) * 1000))
        self.log.info(event, notice_id=nid, **data)
        self.spool.emit(event, nid, data, now)
        self.publish()

    def _undo(self, nid: str, rec: dict[str, Any]) -> None:
        if self.slurm is not None:   # RESUME only the agent's own drain
            self.slurm.undo(nid, rec, time.time(), other_notices=bool(self.active.keys() - {nid}))
            return
        if self.kube is None:
            return
        if "cordoned" not in rec["steps"] and "lb_excluded" not in rec["steps"]:
            if nid in self.kube.runners:
                self.kube.withdraw(nid, rec)   # stop the drain; nothing on the node to undo yet
                return
            rec["state"] = "withdrawn"
            self._save()
            return
        self.kube.withdraw(nid, rec)

    # -- reports from the drain threads ---------------------------------------------------
    def on_reports(self, now: float) -> None:
        if self.kube is None:
            return
        changed = False
        for r in self.kube.reports():
            rec = self.progress.get(r.notice_id)
            if rec is not None:
                changed = self._apply(r, rec, now) or changed
        if changed:
            self.publish()
            self.unsaved = True
        # Per-pod records are saved at most every SAVE_EVERY_S (steps and state changes at once):
        # a restart re-reads the cluster anyway, where an evicted pod shows as terminating.
        if self.unsaved and now - self.saved_at >= SAVE_EVERY_S:
            self._save()

    def _apply(self, r: Report, rec: dict[str, Any], now: float) -> bool:
        """One report onto its progress record; True if the record changed."""
        nid = r.notice_id
        if r.kind == "step":
            if r.event:
                self._step(nid, rec, r.name, r.event, r.data, now)
            else:
                rec["steps"][r.name] = now
            return True
        if r.kind == "event":
            uid, pod = str(r.data.get("uid", "")), str(r.data.get("pod", ""))
            if r.event == "drain.evicted":
                rec["evicted"][uid] = pod
                rec["steps"]["evicted"] = now
            elif r.event == "drain.deleted":
                rec["deleted"][uid] = pod
                rec["steps"]["deleted"] = now
            elif r.event == "drain.eviction_blocked":
                rec["reported"].append(uid)
            self.log.info(r.event, notice_id=nid, **r.data)
            self.spool.emit(r.event, nid, r.data, now)
            return True
        if r.kind == "remaining":
            rec["remaining"] = r.data.get("pods") or []
        elif r.kind == "phase":
            rec["phase"] = r.name
        elif r.kind == "state":
            if rec["state"] == "withdrawn" or (r.name != "withdrawn" and nid in self.withdrawn):
                return False   # a late report from a drain that was stopped
            rec["state"] = r.name
            self._save()
            if r.name in END_STATES + ("withdrawn",) and self.kube is not None:
                self.kube.finished(nid)
        elif r.kind == "log":
            self.log.warning(r.name, notice_id=nid, **r.data)
            if r.name == "drain.dry_run":
                self.spool.emit("drain.dry_run", nid, r.data, now)
            return False
        return True

    def publish(self) -> None:
        ipc.send(self.pub, ipc.T_PROGRESS, {"notices": self.progress})


def main(argv: list[str] | None = None) -> int:
    config, log = start("executor", argv)
    stop = StopFlag()
    ctx = zmq.Context()
    ex = Executor(config, log, ctx)
    poller = zmq.Poller()
    for sock in (ex.sub, ex.escalate_sub, ex.spool.sock):
        poller.register(sock, zmq.POLLIN)
    if ex.clients is not None:
        poller.register(ex.clients.fileno(), zmq.POLLIN)
    if ex.kube is not None:
        poller.register(ex.kube.fileno(), zmq.POLLIN)
    last_publish = 0.0
    while not stop.stopping:
        # Idle, wake once a second (level-triggered state arrives every second anyway); while a
        # drain runs, four times a second so retries and acks are not held back.
        busy = any(r.get("state") == "running" for r in ex.progress.values())
        events = dict(poller.poll(250 if busy else 1000))
        if ex.sub in events:
            ex.on_sub_readable()
        if ex.escalate_sub in events:
            ex.on_escalate_readable()
        if ex.spool.sock in events:
            ex.spool.on_readable()
        if ex.clients is not None:
            mono = time.monotonic()
            if ex.clients.fileno() in events:
                ex.clients.process(mono)
            ex.clients.tick(mono)
        now = time.time()
        ex.on_reports(now)
        ex.work(now)
        ex.spool.tick(now)
        ex.rejections.tick()
        ex.report_socket_errors()
        if now - last_publish >= PUBLISH_EVERY_S:
            ex.publish()
            last_publish = now
    if ex.kube is not None:
        ex.kube.close()
    if ex.clients is not None:
        ex.clients.close()
    ex.rejections.tick(force=True)
    ex.report_socket_errors()
    ex.socket_rejections.tick(force=True)
    ex.spool.flush(1.0)
    ctx.destroy(linger=0)
    log.info("process.stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
