"""The Slurm drain recipe: DRAIN this node, signal its jobs, requeue what stays, verify -- or go around slurmctld.

The executor calls ``SlurmDrain.step(notice, rec, now, policy)`` for every
active notice on each turn of its loop (in place of the Kubernetes steps when
``node.scheduler = "slurm"``). Each call re-reads Slurm's real state and does
what is still missing, so an executor restarted mid-drain simply carries on:

1. DRAIN the node with a reason naming the notice (unless it is already
   drained -- an operator's drain is left as it is), then read the state back:
   a timed-out call may still land, only state proves anything.
2. Until the checkpoint cutoff, signal every RUNNING job once
   (``scancel --signal --batch|--full``); the agent socket clients are told by
   the executor loop itself.
3. From the checkpoint cutoff (or the verifier's ``checkpoint_over``), requeue
   -- or cancel, if the contract says so -- every job still running; from the
   evict cutoff (``evict_over``/``final``), SIGKILL what is still on the node.
4. The node is done when ``sinfo`` says ``drained`` AND ``squeue`` lists no
   R/CG/S job on it; only then is ``remaining`` empty and ``node_empty`` recorded.

When slurmctld does not answer (``scontrol ping``), the jobs are found locally
(``executor.slurm_local``) and signalled directly at the same cutoffs: the
checkpoint signal, then TERM, then KILL. Once the controller answers again the
DRAIN is (re)applied, the state re-read and ``drain.reconciled`` recorded.

The decisions are pure functions in ``executor.slurm_rules``; this module does the I/O.
What must not be repeated is written down before it is done (``rec["slurm"]``,
persisted by the executor): a checkpoint signal and each local signal go out at
most once per job. A requeue is safe to repeat while the job still runs here (a
requeue that landed moved it off RUNNING), so it is retried after a pause.
"""
from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from common.contract import SlurmPolicy
from common.notice import Notice
from executor import slurm_local
from executor.slurm import NotOwnNode, NotRequeueable, Probe, SlurmCli, SlurmError, Unreachable
from executor.slurm_rules import (
    cutoffs,
    drain_reason,
    is_agent_reason,
    local_plan,
    new_memo,
    phase_at,
    remaining,
    to_evict,
    undo_action,
    unsignalled,
)

if TYPE_CHECKING:

    from common.config import Config
    from common.log import Logger
    from common.runtime import SpoolLink

POLL_S = 0.5          # between rounds while slurmctld answers (each round is 4-5 CLI calls)
DOWN_POLL_S = 1.0     # between rounds while it does not (a /proc scan costs 0.1-0.5 s)
RETRY_S = 1.0         # after a refused call
_PHASE_NAME = {"checkpoint": "checkpoint", "evict": "requeue", "kill": "kill"}  # rec["phase"], for the verifier


@dataclass(frozen=True, slots=True)
class Report:
    """How the recipe reports, provided by the executor."""

    step: Callable[[Notice, dict[str, Any], str, str, dict[str, Any]], None]  # record a step, save, emit, publish
    event: Callable[[str, str, dict[str, Any], float], None]                  # (type, notice id, data, now): log + spool
    save: Callable[[], None]                                                  # persist the executor's records


def _no_level(notice_id: str) -> str | None:
    return None


class SlurmDrain:
    """The recipe for one node; one instance serves every notice (see the module docstring)."""

    def __init__(self, cli: SlurmCli, report: Report, levels: Callable[[str], str | None] = _no_level,
                 dry_run: bool = False, scan: Callable[[str, str], dict[int, int]] = slurm_local.scan,
                 proc: str = slurm_local.PROC) -> None:
        self.cli = cli
        self.node = cli.node
        self.report = report
        self.levels = levels
        self.dry_run = dry_run
        self.scan = scan
        self.proc = proc
        self.next_at: dict[str, float] = {}
        self.last_error: dict[str, str] = {}
        self.probe: Probe | None = None
        self.dry_said: set[tuple[str, str]] = set()

    # -- entry points ------------------------------------------------------------
    def step(self, n: Notice, rec: dict[str, Any], now: float, policy: SlurmPolicy) -> None:
        """One round of the drain of notice ``n``; ``rec`` is the executor's record of it."""
        if now < self.next_at.get(n.id, 0.0):
            return
        memo = rec.get("slurm")
        if not isinstance(memo, dict):
            # The drain keeps the policy it started with, whatever contract lands meanwhile.
            memo = rec["slurm"] = new_memo(policy)
            self.report.save()
        ph = phase_at(cutoffs(rec["received_at"], n.deadline, rec["budget"]), now, self.levels(n.id))
        why = "slurmctld does not answer scontrol ping"
        if self._controller_answers(memo, now):
            try:
                self._through_controller(n, rec, memo, ph, now)
                self.next_at[n.id] = now + POLL_S
                self.last_error.pop(n.id, None)
                return
            except Unreachable as e:
                why = str(e)
                self._error(n.id, e, now)
            except (SlurmError, NotOwnNode) as e:
                self._error(n.id, e, now)
                self.next_at[n.id] = now + RETRY_S
                return
        self._around_controller(n, rec, memo, ph, now, why)
        self.next_at[n.id] = now + DOWN_POLL_S

    def undo(self, nid: str, rec: dict[str, Any], now: float, other_notices: bool) -> None:
        """A withdrawn notice: RESUME the node if (and only if) the agent's own drain holds it."""
        if now < self.next_at.get(nid, 0.0):
            return
        self.next_at[nid] = now + DOWN_POLL_S
        memo = rec.get("slurm") or {"down_since": None}
        try:
            if not self._controller_answers(memo, now):
                return  # kept until the controller answers: the DRAIN may still be there
            node = self.cli.node_info(self.node)
            action = undo_action(node, other_notices)
            if action == "wait":
                return  # asked again in DOWN_POLL_S
            if action == "resume":
                self._act(nid, "resume", lambda: self.cli.resume(self.node), now)
                node = self.cli.node_info(self.node)
        except (SlurmError, NotOwnNode) as e:
            self._error(nid, e, now)
            return
        rec["state"] = "withdrawn"
        rec["steps"]["uncordoned"] = now
        self.report.save()
        self.report.event("drain.uncordoned", nid, {"scheduler": "slurm", "action": action,
                                                    "node_state": node.state, "reason": node.reason}, now)

    # -- with the controller ------------------------------------------------------
    def _controller_answers(self, memo: dict[str, Any], now: float) -> bool:
        if memo.get("down_since") is None:
            return self.cli.ping()
        # Known down: ask in the background, so a hung controller never blocks the loop.
        if self.probe is None:
            self.probe = self.cli.start_ping(now)
            return False
        answer = self.probe.result(now)
        if answer is None:
            return False
        self.probe = None
        return answer

    def _through_controller(self, n: Notice, rec: dict[str, Any], memo: dict[str, Any], ph: str,
                            now: float) -> None:
        node = self.cli.node_info(self.node)
        if not node.drain_set:
            self._act(n.id, "drain", lambda: self.cli.drain(self.node, drain_reason(n)), now)
            # Read back: state is the proof, not the return code (and a DRAIN sent to a
            # hung controller earlier may have landed meanwhile).
            node = self.cli.node_info(self.node)
        if "cordoned" not in rec["steps"] and (node.drain_set or self.dry_run):
            self.report.step(n, rec, "cordoned", "drain.cordoned", {
                "scheduler": "slurm", "node_state": node.state, "reason": node.reason,
                "agent_drain": is_agent_reason(node.reason)})
        if memo["down_since"] is not None:
            self.report.step(n, rec, "reconciled", "drain.reconciled", {
                "down_s": round(now - memo["down_since"], 3), "node_state": node.state,
                "reason": node.reason, "drain_set": node.drain_set})
            memo["down_since"] = None
            self.report.save()
        if rec["policy"] != "drain":
            rec["state"] = "cordoned_only"
            self.report.save()
            return
        running = self.cli.jobs_on(self.node, "RUNNING")
        if ph == "checkpoint":
            self._signal(n, rec, memo, unsignalled(running, memo), now)
        else:
            self._evict(n, rec, memo, to_evict(running, memo, now), now)
        active = self.cli.jobs_on(self.node, "R,CG,S")
        if ph == "kill" and active:
            self._kill_leftovers(n, rec, memo, active, now)
        # The whole-cluster sinfo read only when squeue says the node is empty.
        state = "" if active else self.cli.node_state(self.node)
        rec["phase"] = _PHASE_NAME[ph]
        rec["remaining"] = remaining(active, state)
        if not rec["remaining"]:
            rec["state"] = "done"
            self.report.step(n, rec, "node_empty", "drain.node_empty", {"node_state": state})

    def _signal(self, n: Notice, rec: dict[str, Any], memo: dict[str, Any], jobs: list[int], now: float) -> None:
        pol = memo["policy"]
        sent: list[int] = []
        failed: dict[str, str] = {}
        try:
            for j in jobs:
                # At most once: written down before it is sent. A crash in between loses one
                # checkpoint signal (the requeue at the cutoff still moves the job); a second
                # signal could interrupt a checkpoint in progress.
                memo["signalled"][str(j)] = now
                self.report.save()
                try:
                    self._act(n.id, f"signal {j}", lambda j=j: self.cli.signal(
                        self.node, j, pol["signal"], pol["signal_scope"]), now)
                    sent.append(j)
                except SlurmError as e:
                    if isinstance(e, Unreachable):
                        raise  # it may still land: the record stays
                    del memo["signalled"][str(j)]
                    failed[str(j)] = e.message
        finally:
            if sent or failed:
                self.report.step(n, rec, "signalled", "drain.signalled", {
                    "jobs": sent, "failed": failed, "signal": pol["signal"], "scope": pol["signal_scope"],
                    "via": "scancel"})

    def _evict(self, n: Notice, rec: dict[str, Any], memo: dict[str, Any], jobs: list[int], now: float) -> None:
        cancel = memo["policy"]["on_drain"] == "cancel"
        moved: list[int] = []
        gone: list[int] = []
        refused: dict[str, str] = {}
        try:
            for j in jobs:
                memo["evicted"][str(j)] = now
                self.report.save()
                try:
                    if cancel:
                        self._act(n.id, f"cancel {j}", lambda j=j: self.cli.cancel(self.node, j), now)
                        moved.append(j)
                    elif self._act(n.id, f"requeue {j}", lambda j=j: self.cli.requeue(self.node, j), now) is False:
                        gone.append(j)
                    else:
                        moved.append(j)
                except NotRequeueable as e:
                    memo["refused"][str(j)] = e.message
                    refused[str(j)] = e.message
        finally:
            if moved or gone:
                step, event = ("deleted", "drain.deleted") if cancel else ("requeued", "drain.requeued")
                self.report.step(n, rec, step, event, {
                    "jobs": moved, "already_gone": gone,
                    "via": "scancel" if cancel else "scontrol requeue"})
            if refused:
                self.report.save()
                self.report.event("drain.error", n.id, {
                    "scheduler": "slurm", "error": "requeue refused (job not requeueable)", "jobs": refused,
                    "action": "left on the node: the contract's slurm.on_drain is requeue, not cancel"}, now)

    def _kill_leftovers(self, n: Notice, rec: dict[str, Any], memo: dict[str, Any], active: list[int],
                        now: float) -> None:
        """Past the evict cutoff, SIGKILL what is still here rather than wait out Slurm's KillWait."""
        plan = local_plan("kill", active, memo)
        if not plan:
            return
        procs = self._job_procs()
        signalled = self._signal_locally([p for p in plan if p[0] in procs], procs, memo, n.id, now)
        if signalled:
            self.report.step(n, rec, "signalled", "drain.signalled", {
                "jobs": sorted(int(j) for j in signalled), "signal": "SIGKILL", "scope": "full",
                "via": "local", "signalled": signalled})

    # -- around the controller ------------------------------------------------------
    def _around_controller(self, n: Notice, rec: dict[str, Any], memo: dict[str, Any], ph: str,
                           now: float, why: str) -> None:
        entering = memo["down_since"] is None
        if entering:
            memo["down_since"] = now
            self.report.save()
        rec["phase"] = "fallback"
        if rec["policy"] != "drain":
            # Cordon only: there is nothing to do without the controller; DRAIN once it is back.
            rec["remaining"] = ["slurmctld:unreachable"]
            return
        procs = self._job_procs()
        signalled = self._signal_locally(local_plan(ph, sorted(procs), memo), procs, memo, n.id, now)
        if entering or signalled:
            self.report.step(n, rec, "fallback", "drain.fallback", {
                "reason": why[:300], "phase": ph, "jobs_found": sorted(procs), "signalled": signalled})
        rec["remaining"] = [str(j) for j in sorted(procs)] or ["slurmctld:unreachable"]

    def _job_procs(self) -> dict[int, list[slurm_local.JobProc]]:
        conf = self.cli.conf
        try:
            rows = self.cli.listpids()
        except SlurmError:
            rows = []  # the /proc scan is the second source
        return slurm_local.find(rows, self.scan(conf, self.node), conf, self.node, self.proc)

    def _signal_locally(self, plan: list[tuple[int, str, str, str]], procs: dict[int, list[slurm_local.JobProc]],
                        memo: dict[str, Any], nid: str, now: float) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for job, sig, scope, key in plan:
            memo["local"][key][str(job)] = now
            self.report.save()
            sent = self._act(nid, f"{sig} job {job}", lambda job=job, sig=sig, scope=scope: slurm_local.signal_job(
                procs[job], signal.Signals[sig], scope, self.cli.conf, self.node, self.proc), now)
            out[str(job)] = {"signal": sig, "scope": scope, **(sent or {"groups": [], "pids": []})}
        return out

    # -- plumbing ---------------------------------------------------------------------
    def _act(self, nid: str, what: str, action: Callable[[], Any], now: float) -> Any:
        """Run a change, or in dry-run mode only say what it would be."""
        if not self.dry_run:
            return action()
        if (nid, what) not in self.dry_said:  # said once, not every round
            self.dry_said.add((nid, what))
            self.report.event("drain.dry_run", nid, {"scheduler": "slurm", "action": what}, now)
        return None

    def _error(self, nid: str, e: Exception, now: float) -> None:
        # One event per distinct error, not one per round: a dead controller must not flood the spool.
        text = str(e)[:300]
        if self.last_error.get(nid) != text:
            self.last_error[nid] = text
            self.report.event("drain.error", nid, {"scheduler": "slurm", "error": text}, now)


def build(config: Config, log: Logger, spool: SpoolLink,
          step: Callable[[Notice, dict[str, Any], str, str, dict[str, Any]], None],
          save: Callable[[], None], level: Callable[[str], str | None]) -> SlurmDrain:
    """The recipe wired to the executor: its config, logger, spool link, step helper and the
    verifier's escalation level of a notice (the executor subscribes to it once, for both schedulers)."""

    def event(type: str, nid: str, data: dict[str, Any], now: float) -> None:
        log.info(type, notice_id=nid, **data)
        spool.emit(type, nid, data, now)

    def audit(argv: tuple[str, ...]) -> None:
        log.info("slurm.command", argv=list(argv))

    s = config.slurm
    cli = SlurmCli(config.node.name, s.conf, s.command_timeout_s, audit=audit)
    return SlurmDrain(cli, Report(step, event, save), level, dry_run=config.executor.dry_run)
