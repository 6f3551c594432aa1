"""The Kubernetes scheduler (``executor.scheduler.Scheduler``): starts drain runners, hands them orders.

Runs on the executor loop's thread; the blocking calls run in the runners'
threads. Each draining notice gets a ``DrainRunner`` (one at a time: they all
drain the same node, so a second notice waits and then finds the node empty at
once); a withdrawn one gets a ``WithdrawRunner``. Runners report through a
``ReportQueue`` whose pipe the loop polls, so a report is handled as soon as it
is made, not at the next poll timeout.
"""
from __future__ import annotations

import math
import os
import random
import ssl
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from common.http import TlsFiles
from common.pod_policy import Rules
from common.timefmt import format_rfc3339
from common.wire import EVICT_OVER, FINAL, DrainState, Step
from executor.kube import node_steps, pacing
from executor.kube.api import KubeApi, KubeError, NotOwnNode, Throttled, Unreachable, identities
from executor.kube.drain_plan import down_after
from executor.kube.drain_spec import DrainSpec
from executor.kube.eviction_book import Inputs
from executor.kube.runner import DrainRunner
from executor.scheduler import Announce, Log, NewState, Order, Report, ReportQueue, StepDone, Withdrawal

if TYPE_CHECKING:
    from common.config import Config
    from common.log import Logger

RESTART_AFTER_S = 1.0   # a runner that died (it reports why) is started again after this
ESCALATED = (EVICT_OVER, FINAL)   # verifier levels at which PDB-blocked pods are escalated
_NODE_STEPS = (Step.CORDONED, Step.LB_EXCLUDED)   # what a withdrawal has to undo


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
    files = TlsFiles(k.ca_file, k.client_cert_file, k.client_key_file)
    # One TLS context per identity for every thread (~1 MiB each): the node's (its client
    # certificate, if any) and the taint token's (the CA only: never a certificate with a token).
    shared: dict[str, ssl.SSLContext] = {}

    def make() -> KubeApi:
        node, taint = identities(_read_token(k.token_file), _read_token(k.taint_token_file), files)
        api = KubeApi(k.api_url, config.node.name, node.token, timeout_s=k.timeout_s,
                      tls=shared.get("node", node.tls), node_token=taint.token if taint else "",
                      taint_tls=shared.get("taint", taint.tls) if taint else None)
        if "node" not in shared and api.http.tls is not None:   # None: plain http, nothing to share
            shared["node"] = api.http.tls
        if taint is not None and "taint" not in shared and api.taint_http.tls is not None:
            shared["taint"] = api.taint_http.tls
        return api
    return make


def build(config: Config, log: Logger) -> KubeScheduler | None:
    make_api = api_factory(config)
    if make_api is None:
        log.error("kubernetes.unconfigured", detail="kubernetes.api_url is empty")
        return None
    return KubeScheduler(config, make_api)


def memo_problem(memo: dict[str, Any]) -> str:
    """Why a drain record's Kubernetes memory cannot be used, or ""."""
    bad = [k for k in ("evicted", "deleted") if not isinstance(memo.get(k, {}), dict)]
    if not isinstance(memo.get("reported", []), list):
        bad.append("reported")
    started = memo.get("fallback_started", 0.0)
    if isinstance(started, bool) or not isinstance(started, (int, float)) or not math.isfinite(started):
        bad.append("fallback_started")
    return f"wrong type: {bad}" if bad else ""


def drain_spec(o: Order, config: Config) -> DrainSpec:
    """The runner's fixed inputs, from the order (pure)."""
    memo = o.memo
    return DrainSpec(
        notice_id=o.notice_id, kind=o.kind, deadline=o.deadline, deadline_text=format_rfc3339(o.deadline),
        received_at=o.received_at, ends=o.ends, taint_key=o.taint_key, cordon_only=o.cordon_only,
        pdb_blocked=o.pdb_blocked, exclude_from_lb=o.exclude_from_lb, down_after_s=down_after(o.budget.evict_s),
        fallback_command=tuple(config.kubernetes.fallback_command), steps_done=o.steps_done,
        evicted=dict(memo.get("evicted") or {}), deleted=dict(memo.get("deleted") or {}),
        reported=tuple(str(u) for u in memo.get("reported") or ()), dry_run=config.executor.dry_run,
        fallback_allowed=o.fallback_allowed, fallback_at=o.fallback_at,
        fallback_started=float(memo.get("fallback_started") or 0.0),
        write_spread_s=o.contract.first_write_spread_ms / 1000.0, pod_rules=pod_rules(o))


def pod_rules(o: Order) -> Rules:
    """What each pod's own policy is judged by in this drain (common.pod_policy)."""
    local = o.contract.local_pods
    return Rules(o.kind, o.deadline, o.budget.evict_s, local.delete_emptydir_data, local.force)


def inputs_of(o: Order) -> Inputs:
    return Inputs(held=o.held, hold_all=o.hold_all, escalated=o.level in ESCALATED, held_until=o.held_until)


class KubeScheduler:
    def __init__(self, config: Config, make_api: Callable[[], KubeApi]) -> None:
        self.config = config
        self.make_api = make_api
        self._out = ReportQueue()
        self.runners: dict[str, DrainRunner] = {}
        self.withdrawals: dict[str, WithdrawRunner] = {}
        self._restart_at: dict[str, float] = {}
        self._settled: set[str] = set()   # withdrawn before anything was done on the node

    def fileno(self) -> int:
        return self._out.fileno()

    def reports(self) -> list[Report]:
        out = self._out.take()
        for r in out:
            if isinstance(r, NewState):   # the drain reached an end state: forget its runner
                self.runners.pop(r.notice_id, None)
        return out

    def advance(self, order: Order, now: float) -> None:
        """Keep a runner going for a running notice, and hand it the loop's latest inputs."""
        nid = order.notice_id
        runner = self.runners.get(nid)
        if runner is not None and runner.alive:
            runner.inputs = inputs_of(order)
            return
        if runner is not None:   # it ended without saying done: it crashed, or was stopped
            del self.runners[nid]
            self._restart_at[nid] = now + RESTART_AFTER_S
        if now < self._restart_at.get(nid, 0.0):
            return
        busy = [r for r in self.runners.values() if r.alive]
        if busy:
            # A more urgent notice takes over: a drain whose pods' own policy holds them (DESIGN
            # section 9) runs until its deadline, and must not keep a reclaim waiting that long. The
            # stopped one starts again once the urgent one is done.
            for r in busy:
                if r.spec.deadline > order.deadline:
                    r.stop()
            return
        self.runners[nid] = DrainRunner(drain_spec(order, self.config), self.make_api, self._out.put,
                                        inputs_of(order)).start()

    def withdraw(self, w: Withdrawal, now: float) -> None:
        """Stop the notice's drain, then undo what it did to the node (once the drain has stopped)."""
        nid = w.notice_id
        runner = self.runners.get(nid)
        if runner is not None:
            runner.stop()
            if runner.alive:
                return
            del self.runners[nid]
        elif not any(s in w.steps_done for s in _NODE_STEPS) and nid not in self.withdrawals:
            if nid not in self._settled:   # nothing on the node to undo
                self._settled.add(nid)
                self._out.put(NewState(nid, DrainState.WITHDRAWN))
            return
        prior = self.withdrawals.get(nid)
        # A runner that succeeded has reported; the loop applies that (state withdrawn) on its next turn.
        if prior is None or not (prior.alive or prior.succeeded):
            self.withdrawals[nid] = WithdrawRunner(nid, w.taint_key, self.make_api, self._out.put,
                                                   self.config.executor.dry_run).start()

    def close(self) -> None:
        for r in list(self.runners.values()) + list(self.withdrawals.values()):
            r.stop()
        self._out.close()


class WithdrawRunner:
    """Undo a withdrawn notice's cordon, taint and label off the loop: retried until the server
    agrees, then ``drain.uncordoned`` and the state ``withdrawn``. Retries are paced as the
    drain's are (``pacing``): a throttled answer waits its Retry-After doubling to 8 s, any other
    failure 0.5 s doubling to 8 s, both with jitter -- a hall whose notices were all withdrawn at
    once must not come back to a struggling server in lock-step every second."""

    def __init__(self, notice_id: str, taint_key: str, make_api: Callable[[], KubeApi],  # noqa: PLR0913 -- the wait and the draw are for tests
                 report: Callable[[Report], None], dry_run: bool = False, *,
                 wait: Callable[[float], bool] | None = None, rand: Callable[[], float] | None = None) -> None:
        self.notice_id, self.taint_key, self.dry_run = notice_id, taint_key, dry_run
        self._make_api, self._report = make_api, report
        self._rand = rand or random.Random(notice_id).random   # per notice: agents draw apart
        # Set before the reports go out: the loop may see the thread gone before it has read them.
        self.succeeded = False
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._thread = threading.Thread(target=self._main, name=f"withdraw-{notice_id[:16]}", daemon=True)

    def start(self) -> WithdrawRunner:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _main(self) -> None:
        api = self._make_api()
        last = ""
        nid = self.notice_id
        failures = throttles = 0
        try:
            while not self._stop.is_set():
                try:
                    if self.dry_run:
                        self._report(Announce(nid, "drain.dry_run", {"action": "uncordon"}))
                    else:
                        node_steps.uncordon(api, self.taint_key, nid)
                    self.succeeded = True
                    self._report(StepDone(nid, Step.UNCORDONED, "drain.uncordoned"))
                    self._report(NewState(nid, DrainState.WITHDRAWN))
                    return
                except (Unreachable, KubeError, NotOwnNode) as e:
                    if str(e) != last:
                        last = str(e)
                        self._report(Log(nid, "drain.uncordon_failed", {"error": last[:300]}))
                    if isinstance(e, Throttled):
                        throttles += 1
                        delay = pacing.throttled_delay(throttles, e.retry_after, self._rand)
                    else:
                        failures += 1
                        delay = pacing.error_delay(failures, self._rand)
                self._wait(delay)
        finally:
            api.close()
