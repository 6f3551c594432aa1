"""The Slurm drain recipe: DRAIN this node, signal its jobs, requeue what stays, verify -- or go around slurmctld.

The Slurm scheduler's worker thread calls ``SlurmDrain.step(tracked, at)`` for every running
drain with the core's latest order; each call re-reads Slurm's real state and does what is still
missing (its pacing on the monotonic clock), so an executor restarted mid-drain carries on:

1. DRAIN the node with a reason naming the governing notice (renamed when another takes
   the drain over; an operator's drain is left as it is), then read the state back:
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
(``executor.slurm.local``) and signalled directly at the same cutoffs: the
checkpoint signal, then TERM, then KILL. Once the controller answers again the
DRAIN is (re)applied, the state re-read and ``drain.reconciled`` recorded.

The decisions are pure functions in ``executor.slurm.rules``; this module does the I/O.
What must not be repeated is written down first (the memo; ``Out.remember`` returns once
the executor has it on disk): a checkpoint signal and each local signal go out at most once
per job; a requeue is safe to repeat while the job still runs here (one that landed moved it).
"""
from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from common.clock import Moment
from common.events import EventType
from common.recorder import Recorder
from common.wire import DrainState, Phase, Step
from executor.scheduler import Announce, InPhase, NewState, Order, Remaining, Report, StepDone, Withdrawal
from executor.slurm import local as slurm_local
from executor.slurm.cli import NotOwnNode, NotRequeueable, Probe, SlurmCli, SlurmError, Unreachable
from executor.slurm.memo import SlurmMemo, of_record
from executor.slurm.rules import (
    drain_reason,
    drain_wanted,
    dry_run_jobs,
    is_agent_reason,
    local_plan,
    new_memo,
    phase_at,
    remaining,
    to_evict,
    undo_action,
    unsignalled,
)

POLL_S = 0.5          # between rounds while slurmctld answers (each round is 4-5 CLI calls)
DOWN_POLL_S = 1.0     # between rounds while it does not (a /proc scan costs 0.1-0.5 s)
RETRY_S = 1.0         # after a refused call
ERROR_REPEAT_S = 60.0  # the same error of one notice is said again (with its count) only this often
# The recipe's phase -> the record's phase (common.wire.Phase), for the verifier.
_PHASE_NAME = {"checkpoint": Phase.CHECKPOINT, "evict": Phase.REQUEUE, "kill": Phase.KILL}


class Out(Protocol):
    """Where the recipe reports (the scheduler's queue to the executor loop; a recorder in tests)."""

    def put(self, r: Report) -> None: ...

    def remember(self, notice_id: str, memo: dict[str, Any]) -> None:
        """Returns once the record holding ``memo`` is on disk."""


@dataclass(slots=True)
class Tracked:
    """One notice's drain as the recipe knows it between rounds (on the worker thread only)."""

    order: Order
    memo: SlurmMemo   # the record's "slurm" memo; a new one keeps the policy of the contract it started on
    steps: set[str] = field(default_factory=set)
    phase: str = ""
    remaining: tuple[str, ...] | None = None
    next_at: float = float("-inf")   # MonoTime: when the next round is due
    finished: bool = False
    kept: bool = True   # the memo is in the record

    @classmethod
    def of(cls, order: Order) -> Tracked:
        memo = of_record(order.memo)
        return cls(order, memo or new_memo(order.contract.slurm), set(order.steps_done), kept=memo is not None)


class SlurmDrain:
    """The recipe for one node; one instance serves every notice (see the module docstring)."""

    def __init__(self, cli: SlurmCli, out: Out, dry_run: bool = False,
                 scan: Callable[[str, str], dict[int, int]] = slurm_local.scan, proc: str = slurm_local.PROC) -> None:
        self.cli = cli
        self.node = cli.node
        self.out = out
        self.dry_run = dry_run
        self.scan = scan
        self.proc = proc
        # Keyed by (drain.error, notice id + text); last_error: the key each notice last failed with.
        self.errors = Recorder(self._say_error, ERROR_REPEAT_S)
        self.last_error: dict[str, str] = {}
        self.undo_at: dict[str, float] = {}   # MonoTime: a withdrawal's next try
        self.probe: Probe | None = None
        self.dry_said: set[tuple[str, str]] = set()

    # -- entry points ------------------------------------------------------------
    def tick(self, force: bool = False, mono: float | None = None) -> None:
        """Say the errors counted since their last report once their window (monotonic) has passed."""
        self.errors.tick(force, mono)

    def step(self, t: Tracked, at: Moment) -> None:
        """One round of the drain of ``t``, paced on the monotonic clock (phases: the wall clock's)."""
        o, now = t.order, at.wall
        if t.finished or at.mono < t.next_at:
            return
        if not t.kept:
            t.kept = True
            self._remember(t)
        if self.dry_run:
            self._dry_run(t)
            return
        ph = phase_at(o.ends, now, o.level)
        why = "slurmctld does not answer scontrol ping"
        if self._controller_answers(t.memo.down_since, at.mono):
            try:
                self._through_controller(t, ph, now)
                t.next_at = at.mono + POLL_S
                if o.notice_id in self.last_error:   # answered again: the next failure is news
                    self.errors.forget("drain.error", self.last_error.pop(o.notice_id))
                return
            except Unreachable as e:
                why = str(e)
                self._error(o.notice_id, e, at.mono)
            except (SlurmError, NotOwnNode) as e:
                self._error(o.notice_id, e, at.mono)
                t.next_at = at.mono + RETRY_S
                return
        self._around_controller(t, ph, now, why)
        t.next_at = at.mono + DOWN_POLL_S

    def undo(self, w: Withdrawal, at: Moment) -> bool:
        """A withdrawn notice: RESUME the node if (and only if) the agent's own drain holds it.
        True once done (reported: drain.uncordoned, the state withdrawn)."""
        nid, now = w.notice_id, at.wall
        if at.mono < self.undo_at.get(nid, float("-inf")):
            return False
        self.undo_at[nid] = at.mono + DOWN_POLL_S   # an interval: monotonic
        memo = of_record(w.memo)
        try:
            if not self._controller_answers(memo.down_since if memo is not None else None, at.mono):
                return False  # kept until the controller answers: the DRAIN may still be there
            node = self.cli.node_info(self.node)
            action = undo_action(node, w.others_active)
            if action == "wait":
                return False  # asked again in DOWN_POLL_S
            if action == "resume":
                self._act(nid, "resume", lambda: self.cli.resume(self.node), now)
                node = self.cli.node_info(self.node)
        except (SlurmError, NotOwnNode) as e:
            self._error(nid, e, at.mono)
            return False
        self.out.put(StepDone(nid, Step.UNCORDONED, "drain.uncordoned", {
            "scheduler": "slurm", "action": action, "node_state": node.state, "reason": node.reason}))
        self.out.put(NewState(nid, DrainState.WITHDRAWN))
        return True

    # -- reporting -----------------------------------------------------------------
    def _remember(self, t: Tracked) -> None:
        self.out.remember(t.order.notice_id, {"slurm": t.memo.to_dict()})

    def _step(self, t: Tracked, step: str, event: EventType, data: dict[str, Any]) -> None:
        t.steps.add(step)
        self.out.put(StepDone(t.order.notice_id, step, event, data))

    def _event(self, nid: str, event: EventType, data: dict[str, Any]) -> None:
        self.out.put(Announce(nid, event, data))

    def _progress(self, t: Tracked, phase: str, left: list[str]) -> None:
        """The phase and what is left, reported when they change."""
        if phase != t.phase:
            t.phase = phase
            self.out.put(InPhase(t.order.notice_id, phase))
        if tuple(left) != t.remaining:
            t.remaining = tuple(left)
            self.out.put(Remaining(t.order.notice_id, t.remaining))

    def _finish(self, t: Tracked, state: str) -> None:
        t.finished = True
        self.out.put(NewState(t.order.notice_id, state))

    # -- a dry run --------------------------------------------------------------------
    def _dry_run(self, t: Tracked) -> None:
        """Read once, spool the one plan, end in ``dry_run``: no write, no local signal, no second round."""
        o, pol = t.order, t.memo.policy
        plan: dict[str, Any] = {"scheduler": "slurm", "jobs": None,
                                "drain": {"node": self.node, "reason": drain_reason(o.notice_id, o.kind, o.deadline)}}
        try:
            if not self.cli.ping():
                raise Unreachable(["scontrol", "ping"], 1, "slurmctld does not answer")
            node = self.cli.node_info(self.node)
            plan["drain"]["already_drained"] = node.drain_set
            running = [] if o.cordon_only else self.cli.jobs_on(self.node, "RUNNING")
            plan["jobs"] = dry_run_jobs(running, pol, o.ends)
        except (SlurmError, NotOwnNode) as e:
            plan["unreadable"] = str(e)[:300]
            self._event(o.notice_id, "drain.dry_run", {
                "scheduler": "slurm", "action": "fallback",
                "would": "signal the node's jobs locally at the same cutoffs (checkpoint signal, TERM, KILL)",
                "checkpoint_by": o.ends.checkpoint_by, "kill_at": o.ends.evict_at})
        self._event(o.notice_id, "drain.plan", plan)
        self._finish(t, DrainState.DRY_RUN)

    # -- with the controller ------------------------------------------------------
    def _controller_answers(self, down_since: float | None, mono: float) -> bool:
        if down_since is None:
            return self.cli.ping()
        # Known down: ask in the background, so a hung controller does not hold up other notices.
        if self.probe is None:
            self.probe = self.cli.start_ping(mono)   # its timeout is an interval: monotonic
            return False
        answer = self.probe.result(mono)
        if answer is None:
            return False
        self.probe = None
        return answer

    def _through_controller(self, t: Tracked, ph: str, now: float) -> None:
        o, memo = t.order, t.memo
        node = self.cli.node_info(self.node)
        if drain_wanted(node, o.notice_id):
            self._act(o.notice_id, "drain", lambda: self.cli.drain(
                self.node, drain_reason(o.notice_id, o.kind, o.deadline)), now)
            # Read back: state is the proof, not the return code (and a DRAIN sent to a
            # hung controller earlier may have landed meanwhile).
            node = self.cli.node_info(self.node)
        if Step.CORDONED not in t.steps and (node.drain_set or self.dry_run):
            self._step(t, Step.CORDONED, "drain.cordoned", {
                "scheduler": "slurm", "node_state": node.state, "reason": node.reason,
                "agent_drain": is_agent_reason(node.reason)})
        if memo.down_since is not None:
            self._step(t, Step.RECONCILED, "drain.reconciled", {
                "down_s": round(now - memo.down_since, 3), "node_state": node.state,
                "reason": node.reason, "drain_set": node.drain_set})
            memo.down_since = None
            self._remember(t)
        if o.cordon_only:
            self._finish(t, DrainState.CORDONED_ONLY)
            return
        running = self.cli.jobs_on(self.node, "RUNNING")
        if ph == "checkpoint":
            self._signal(t, unsignalled(running, memo), now)
        else:
            self._evict(t, to_evict(running, memo, now), now)
        active = self.cli.jobs_on(self.node, "R,CG,S")
        if ph == "kill" and active:
            self._kill_leftovers(t, active, now)
        # The whole-cluster sinfo read only when squeue says the node is empty.
        state = "" if active else self.cli.node_state(self.node)
        left = remaining(active, state)
        self._progress(t, _PHASE_NAME[ph], left)
        if not left:
            self._step(t, Step.NODE_EMPTY, "drain.node_empty", {"node_state": state})
            self._finish(t, DrainState.DONE)

    def _signal(self, t: Tracked, jobs: list[int], now: float) -> None:
        nid, memo = t.order.notice_id, t.memo
        pol = memo.policy
        sent: list[int] = []
        failed: dict[str, str] = {}
        try:
            for j in jobs:
                # At most once: written down before it is sent. A crash in between loses one
                # checkpoint signal (the requeue at the cutoff still moves the job); a second
                # signal could interrupt a checkpoint in progress.
                memo.signalled[str(j)] = now
                self._remember(t)
                try:
                    self._act(nid, f"signal {j}", partial(self.cli.signal, self.node, j, pol.signal,
                                                          pol.signal_scope), now)
                    sent.append(j)
                except SlurmError as e:
                    if isinstance(e, Unreachable):
                        raise  # it may still land: the record stays
                    del memo.signalled[str(j)]
                    failed[str(j)] = e.message
        finally:
            if sent or failed:
                self._step(t, Step.SIGNALLED, "drain.signalled", {
                    "jobs": sent, "failed": failed, "signal": pol.signal, "scope": pol.signal_scope,
                    "via": "scancel"})

    def _evict(self, t: Tracked, jobs: list[int], now: float) -> None:
        nid, memo = t.order.notice_id, t.memo
        cancel = memo.policy.on_drain == "cancel"
        moved: list[int] = []
        gone: list[int] = []
        refused: dict[str, str] = {}
        try:
            for j in jobs:
                memo.evicted[str(j)] = now
                self._remember(t)
                try:
                    if cancel:
                        self._act(nid, f"cancel {j}", partial(self.cli.cancel, self.node, j), now)
                        moved.append(j)
                    elif self._act(nid, f"requeue {j}", partial(self.cli.requeue, self.node, j), now) is False:
                        gone.append(j)
                    else:
                        moved.append(j)
                except NotRequeueable as e:
                    memo.refused[str(j)] = e.message
                    refused[str(j)] = e.message
        finally:
            if moved or gone:
                self._step(t, Step.DELETED if cancel else Step.REQUEUED, "drain.deleted" if cancel else "drain.requeued",
                           {"jobs": moved, "already_gone": gone, "via": "scancel" if cancel else "scontrol requeue"})
            if refused:
                self._remember(t)
                self._event(nid, "drain.error", {
                    "scheduler": "slurm", "error": "requeue refused (job not requeueable)", "jobs": refused,
                    "action": "left on the node: the contract's slurm.on_drain is requeue, not cancel"})

    def _kill_leftovers(self, t: Tracked, active: list[int], now: float) -> None:
        """Past the evict cutoff, SIGKILL what is still here rather than wait out Slurm's KillWait."""
        plan = local_plan("kill", active, t.memo)
        if not plan:
            return
        procs = self._job_procs()
        signalled = self._signal_locally([p for p in plan if p[0] in procs], procs, t, now)
        if signalled:
            self._step(t, Step.SIGNALLED, "drain.signalled", {
                "jobs": sorted(int(j) for j in signalled), "signal": "SIGKILL", "scope": "full",
                "via": "local", "signalled": signalled})

    # -- around the controller ------------------------------------------------------
    def _around_controller(self, t: Tracked, ph: str, now: float, why: str) -> None:
        memo = t.memo
        entering = memo.down_since is None
        if entering:
            memo.down_since = now
            self._remember(t)
        if t.order.cordon_only:
            # Cordon only: there is nothing to do without the controller; DRAIN once it is back.
            self._progress(t, Phase.FALLBACK, ["slurmctld:unreachable"])
            return
        procs = self._job_procs()
        signalled = self._signal_locally(local_plan(ph, sorted(procs), memo), procs, t, now)
        if entering or signalled:
            self._step(t, Step.FALLBACK, "drain.fallback", {
                "reason": why[:300], "phase": ph, "jobs_found": sorted(procs), "signalled": signalled})
        self._progress(t, Phase.FALLBACK, [str(j) for j in sorted(procs)] or ["slurmctld:unreachable"])

    def _job_procs(self) -> dict[int, list[slurm_local.JobProc]]:
        conf = self.cli.conf
        try:
            rows = self.cli.listpids()
        except SlurmError:
            rows = []  # the /proc scan is the second source
        return slurm_local.find(rows, self.scan(conf, self.node), conf, self.node, self.proc)

    def _signal_locally(self, plan: list[tuple[int, str, str, str]], procs: dict[int, list[slurm_local.JobProc]],
                        t: Tracked, now: float) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for job, sig, scope, key in plan:
            t.memo.local[key][str(job)] = now
            self._remember(t)
            sent = self._act(t.order.notice_id, f"{sig} job {job}",
                             partial(slurm_local.signal_job, procs[job], signal.Signals[sig], scope, self.cli.conf,
                                     self.node, self.proc), now)
            out[str(job)] = {"signal": sig, "scope": scope, **(sent or {"groups": [], "pids": []})}
        return out

    # -- plumbing ---------------------------------------------------------------------
    def _act(self, nid: str, what: str, action: Callable[[], Any], now: float) -> Any:
        """Run a change, or in dry-run mode only say what it would be."""
        if not self.dry_run:
            return action()
        if (nid, what) not in self.dry_said:  # said once, not every round
            self.dry_said.add((nid, what))
            self._event(nid, "drain.dry_run", {"scheduler": "slurm", "action": what})
        return None

    def _error(self, nid: str, e: Exception, mono: float) -> None:
        """A failed call: one event per (notice, text) and window, not one per round, so a dead
        controller does not flood the spool. What used to be "the same text again is dropped" is
        now "said again with its count once ERROR_REPEAT_S has passed" (common/recorder.py)."""
        text = str(e)[:300]
        self.last_error[nid] = f"{nid}\n{text}"
        self.errors.record("drain.error", self.last_error[nid],
                           {"scheduler": "slurm", "error": text, "notice_id": nid}, now=mono)

    def _say_error(self, type_: EventType, data: dict[str, Any]) -> None:
        self._event(data.pop("notice_id"), type_, data)
