"""The Kubernetes scheduler (``executor.scheduler.Scheduler``): starts drain runners, hands them orders.

Runs on the executor loop's thread; the blocking calls run in the runners'
threads. The node's one drain is a ``DrainRunner`` for the notice that governs it
(the core's order names it). When another notice takes the drain over, the runner
of the previous one is stopped and the new one starts as soon as it has: it
re-applies the cordon and taint for its own notice (kind, deadline) and paces the
evictions and the fallback by its own deadline, from the node's real state and the
drain's memory. Nothing opens the node meanwhile: a takeover only ever cordons.

A withdrawn notice gets a ``WithdrawRunner``: it undoes the cordon, taint and label
when no other active notice wants them, and otherwise only points them at the
notice that governs now (``Withdrawal.marker``). Runners report through a
``ReportQueue`` whose pipe the loop polls, so a report is handled as soon as it
is made, not at the next poll timeout.
"""
from __future__ import annotations

import os
import random
import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from common.http import TlsFiles
from common.pod_policy import Rules
from common.supervise import pause_for
from common.timefmt import format_rfc3339
from common.wire import EVICT_OVER, FINAL, DrainState, Step
from executor.kube import node_steps, pacing
from executor.kube.api import KubeApi, KubeError, NotOwnNode, Throttled, Unreachable
from executor.kube.book_records import Inputs
from executor.kube.drain_plan import down_after
from executor.kube.drain_spec import DrainSpec
from executor.kube.identity import identities
from executor.kube.memo import KubeMemo
from executor.kube.runner import DrainRunner
from executor.scheduler import Announce, Log, Marker, NewState, Order, Report, ReportQueue, StepDone, Withdrawal

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
    return KubeMemo.problem(memo)


def drain_spec(o: Order, config: Config) -> DrainSpec:
    """The runner's fixed inputs, from the order (pure)."""
    return DrainSpec(
        notice_id=o.notice_id, kind=o.kind, deadline=o.deadline, deadline_text=format_rfc3339(o.deadline),
        received_at=o.received_at, ends=o.ends, taint_key=o.taint_key, cordon_only=o.cordon_only,
        pdb_blocked=o.pdb_blocked, exclude_from_lb=o.exclude_from_lb, down_after_s=down_after(o.budget.evict_s),
        fallback_command=tuple(config.kubernetes.fallback_command), steps_done=o.steps_done,
        memo=KubeMemo.from_dict(o.memo), dry_run=config.executor.dry_run,
        fallback_allowed=o.fallback_allowed, fallback_at=o.fallback_at,
        write_spread_s=o.contract.first_write_spread_ms / 1000.0, pod_rules=pod_rules(o), source=o.source)


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
        self._restart_at: dict[str, float] = {}   # MonoTime
        self._crashes: dict[str, int] = {}        # notice id -> its runners' crashes in a row
        self._settled: set[str] = set()   # withdrawn before anything was done on the node

    def fileno(self) -> int:
        return self._out.fileno()

    def reports(self) -> list[Report]:
        out = self._out.take()
        for r in out:
            if isinstance(r, NewState):   # the drain reached an end state: forget its runner
                self.runners.pop(r.notice_id, None)
                self._crashes.pop(r.notice_id, None)
        return out

    def advance(self, order: Order, now: float) -> None:
        """Keep the node's one drain going for the notice that governs it, with the loop's latest inputs."""
        nid = order.notice_id
        if self._stopping_others(nid):
            return   # the previous drain (or an undo) is stopping: a moment, and this one starts
        runner = self.runners.get(nid)
        if runner is not None and runner.alive:
            runner.inputs = inputs_of(order)
            return
        mono = time.monotonic()   # the restart's pause is an interval (common.clock), not a deadline
        if runner is not None:   # it ended without saying done: it crashed, or was stopped
            del self.runners[nid]
            self._restart_at[nid] = mono + self._restart_pause(nid, runner.crashed)
        if mono < self._restart_at.get(nid, float("-inf")):
            return
        self.runners[nid] = DrainRunner(drain_spec(order, self.config), self.make_api, self._out.put,
                                        inputs_of(order)).start()

    def _restart_pause(self, nid: str, crashed: str) -> float:
        """How long before a runner that ended is started again. One that crashed (an exception nobody
        foresaw) is counted and said (``agent.thread_restarted``), and waits longer each time in a row
        (``common.supervise.pause_for``): a drain that fails at once on every start must not spin."""
        if not crashed:
            return RESTART_AFTER_S   # stopped (a takeover, a withdrawal that was taken back)
        n = self._crashes[nid] = self._crashes.get(nid, 0) + 1
        pause = pause_for(n, RESTART_AFTER_S)
        self._out.put(Announce(nid, "agent.thread_restarted", {
            "thread": f"drain-{nid[:16]}", "error": crashed, "restarts": n, "pause_s": pause}))
        return pause

    def _stopping_others(self, nid: str) -> bool:
        """Stop every runner that is not ``nid``'s drain (a notice that no longer governs, an undo
        that a new notice overtook); True while one of them is still running."""
        busy = False
        for other, r in list(self.runners.items()):
            if other != nid:
                r.stop()
                if r.alive:
                    busy = True
                else:
                    del self.runners[other]
        for w in self.withdrawals.values():
            if w.undo and w.alive:
                w.stop()
                busy = True
        return busy

    def withdraw(self, w: Withdrawal, now: float) -> None:
        """Stop the notice's drain, then undo what it did to the node (once the drain has stopped) --
        or, while another active notice still wants the node marked, point the marks at that one."""
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
        undo = not w.others_active
        prior = self.withdrawals.get(nid)
        if prior is not None and prior.alive and prior.undo != undo:
            prior.stop()   # another notice came (or went) meanwhile: the other kind of withdrawal
            return
        # A runner that succeeded has reported; the loop applies that (state withdrawn) on its next turn.
        if prior is None or not (prior.alive or prior.succeeded):
            if undo and any(r.alive for r in self.runners.values()):
                return   # a drain still runs for another notice: it is stopped first (advance)
            self.withdrawals[nid] = WithdrawRunner(nid, w.taint_key, self.make_api, self._out.put,
                                                   self.config.executor.dry_run, keep=w.keep,
                                                   marker=None if undo else w.marker).start()

    def close(self) -> None:
        for r in list(self.runners.values()) + list(self.withdrawals.values()):
            r.stop()
        self._out.close()


class WithdrawRunner:
    """Undo a withdrawn notice's cordon, taint and label off the loop: retried until the server
    agrees, then ``drain.uncordoned`` and the state ``withdrawn``. With ``keep`` (other active
    notices still want the node marked) nothing is undone: the cordon and taint are (re)applied
    for ``marker``, the notice that governs now, and ``drain.uncordoned`` says they were kept. Retries are paced as the
    drain's are (``pacing``): a throttled answer waits its Retry-After doubling to 8 s, any other
    failure 0.5 s doubling to 8 s, both with jitter -- a hall whose notices were all withdrawn at
    once must not come back to a struggling server in lock-step every second."""

    def __init__(self, notice_id: str, taint_key: str, make_api: Callable[[], KubeApi],  # noqa: PLR0913 -- the wait and the draw are for tests
                 report: Callable[[Report], None], dry_run: bool = False, *,
                 wait: Callable[[float], bool] | None = None, rand: Callable[[], float] | None = None,
                 keep: frozenset[str] = frozenset(), marker: Marker | None = None) -> None:
        self.notice_id, self.taint_key, self.dry_run = notice_id, taint_key, dry_run
        self.keep, self.marker = keep, marker
        self.undo = not keep
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
                    data = self._act(api)
                    self.succeeded = True
                    self._report(StepDone(nid, Step.UNCORDONED, "drain.uncordoned", data))
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

    def _act(self, api: KubeApi) -> dict[str, Any]:
        """The one call, and what the ``drain.uncordoned`` event says of it."""
        if not self.undo:
            kept: dict[str, Any] = {"action": "kept_for_other_notice", "kept_for": sorted(self.keep)[:8]}
            m = self.marker
            if m is not None and not self.dry_run:
                done = node_steps.cordon_and_taint(api, self.taint_key, m.kind, m.notice_id,
                                                   format_rfc3339(m.deadline), m.source)
                kept.update(marked_for=m.notice_id, condition=done["condition"])
            return kept
        if self.dry_run:
            self._report(Announce(self.notice_id, "drain.dry_run", {"action": "uncordon"}))
            return {}
        return node_steps.withdraw(api, self.taint_key, self.notice_id)
