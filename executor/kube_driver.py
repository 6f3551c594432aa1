"""The executor loop's side of the Kubernetes drain: starts runners, hands them inputs, collects reports.

Runs on the loop's thread only. Each draining notice gets a ``DrainRunner``
(one at a time: they all drain the same node, so a second notice waits and
then finds the node empty at once); a withdrawn one gets a
``WithdrawRunner``. Runners report through a queue and write a byte to a
pipe whose read end the loop polls, so a report is handled as soon as it is
made, not at the next poll timeout.
"""
from __future__ import annotations

import os
import queue
import ssl
from collections.abc import Callable
from typing import Any

from common.config import Config
from common.notice import Notice
from executor.drain_plan import deadlines, down_after
from executor.eviction_book import Inputs
from executor.kube import KubeApi
from executor.kube_runner import DrainRunner, DrainSpec, Report, WithdrawRunner, wake_pipe

RESTART_AFTER_S = 1.0   # a runner that died (it reports why) is started again after this


def _read_token(path: str) -> str:
    if not path or not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read(65536).strip()


def api_factory(config: Config) -> Callable[[], KubeApi] | None:
    """Builds a client per thread; token files are read each time, so a rotated token is picked up
    by the next drain (or the next worker)."""
    k = config.kubernetes
    if not k.api_url:
        return None
    shared: list[ssl.SSLContext | None] = []   # one TLS context for every thread (~1 MiB each)

    def make() -> KubeApi:
        api = KubeApi(k.api_url, config.node.name, _read_token(k.token_file), k.ca_file, k.timeout_s,
                      node_token=_read_token(k.taint_token_file), cert_file=k.client_cert_file,
                      key_file=k.client_key_file, tls=shared[0] if shared else None)
        if not shared:
            shared.append(api.http.tls)
        return api
    return make


def drain_spec(n: Notice, rec: dict[str, Any], config: Config) -> DrainSpec:
    """The runner's fixed inputs, from the notice and its persisted progress record (pure)."""
    b = rec["budget"]
    received = float(rec["received_at"])
    return DrainSpec(
        notice_id=n.id, kind=n.kind, deadline=n.deadline, deadline_text=n.to_dict()["deadline"],
        received_at=received,
        deadlines=deadlines(received, n.deadline, b["checkpoint_s"], b["evict_s"], b["margin_s"]),
        taint_key=rec["taint_key"], policy=rec["policy"], pdb_blocked=rec["pdb_blocked"],
        exclude_from_lb=bool(rec["exclude_from_lb"]), down_after_s=down_after(b["evict_s"]),
        fallback_command=tuple(config.kubernetes.fallback_command), steps_done=frozenset(rec["steps"]),
        evicted=frozenset(rec["evicted"]), deleted=frozenset(rec["deleted"]),
        reported=frozenset(rec["reported"]), dry_run=config.executor.dry_run)


class KubeDriver:
    def __init__(self, config: Config, make_api: Callable[[], KubeApi]) -> None:
        self.config = config
        self.make_api = make_api
        self._queue: queue.Queue[Report] = queue.Queue()
        self._wake_r, self._wake_w = wake_pipe()
        self.runners: dict[str, DrainRunner] = {}
        self.withdrawals: dict[str, WithdrawRunner] = {}
        self._restart_at: dict[str, float] = {}

    def fileno(self) -> int:
        """Readable when a runner has reported something."""
        return self._wake_r

    def _report(self, r: Report) -> None:   # called on runner threads
        self._queue.put(r)
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass   # the pipe is full: the loop is awake anyway

    def reports(self) -> list[Report]:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def drain(self, n: Notice, rec: dict[str, Any], inputs: Inputs, now: float) -> None:
        """Keep a runner going for a running notice, and hand it the loop's latest inputs."""
        runner = self.runners.get(n.id)
        if runner is not None and runner.alive:
            runner.inputs = inputs
            return
        if runner is not None:   # it ended without saying done: it crashed, or was stopped
            del self.runners[n.id]
            self._restart_at[n.id] = now + RESTART_AFTER_S
        if now < self._restart_at.get(n.id, 0.0) or any(r.alive for r in self.runners.values()):
            return
        self.runners[n.id] = DrainRunner(drain_spec(n, rec, self.config), self.make_api, self._report,
                                         inputs).start()

    def finished(self, notice_id: str) -> None:
        """The notice's drain reached an end state: forget its runner."""
        self.runners.pop(notice_id, None)

    def withdraw(self, notice_id: str, rec: dict[str, Any]) -> None:
        """Stop the notice's drain, then undo what it did to the node (once the drain has stopped)."""
        runner = self.runners.get(notice_id)
        if runner is not None:
            runner.stop()
            if runner.alive:
                return
            del self.runners[notice_id]
        prior = self.withdrawals.get(notice_id)
        # A runner that succeeded has reported; the loop applies that (state withdrawn) on its next turn.
        if prior is None or not (prior.alive or prior.succeeded):
            self.withdrawals[notice_id] = WithdrawRunner(notice_id, rec["taint_key"], self.make_api,
                                                         self._report, self.config.executor.dry_run).start()

    def close(self) -> None:
        for r in list(self.runners.values()) + list(self.withdrawals.values()):
            r.stop()
        os.close(self._wake_r)
        os.close(self._wake_w)
