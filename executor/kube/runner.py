"""The Kubernetes drain of one notice, run off the executor's loop (the imperative shell).

One thread walks the recipe -- [exclude from load balancers], cordon and taint,
then list / decide / evict until the node is empty -- and serves every watch and
every eviction of the drain itself (``drain_io``: one selector over non-blocking
sockets), as many evictions at once as the book's ``pacing.ConcurrencyLimit``
allows, at most ``workers``. However many pods, PDBs and namespaces: one thread
(``THREADS``).
Every decision is the pure core's (``eviction_book``, ``drain_plan``); this module
does the calls, keeps time, and reports to the executor's loop in the report
vocabulary of ``executor.scheduler``, so the loop keeps serving whatever the API
server does.

When the API server stops answering (``DOWN_AFTER_CALLS`` unanswered calls in a
row spanning ``down_after_s``), the drain waits for it and may go around it
(``executor.kube.outage``). 401, 403 and a failed TLS verification are a
configuration error (``Problem``), never an outage.

A dry run writes nothing: one ``drain.plan`` (``last_resort.dry_run_plan``), then the state ``dry_run``.
"""
from __future__ import annotations

import copy
import itertools
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from common.clock import MonoTime, moment, mono
from common.events import EventType
from common.recorder import Recorder
from common.wire import DrainState, Phase, Step
from executor.kube import conditions, last_resort, node_steps, pacing
from executor.kube.api import (
    CredentialsRefused,
    KubeApi,
    KubeError,
    NotOwnNode,
    Throttled,
    Unreachable,
)
from executor.kube.book_records import Emit, Inputs
from executor.kube.drain_io import DrainIO
from executor.kube.drain_plan import ApiHealth, must_leave_under, next_turn
from executor.kube.drain_spec import DrainSpec
from executor.kube.eviction_book import EvictionBook
from executor.kube.node_listing import NodeListing, Sight
from executor.kube.outage import LINGER_S, AroundTheServer, Stopped
from executor.kube.pod_state import Answer
from executor.kube.pod_view import namespaces_of
from executor.scheduler import (
    Announce,
    InPhase,
    Log,
    NewState,
    Problem,
    Remaining,
    Remember,
    Report,
    StepDone,
)

IDLE_TURN_S = 1.0   # with no change (watches and new inputs wake the drain), replan this often
RETRY_S = 0.5              # between attempts of a node step that failed
WARN_REPEAT_S = 60.0       # a warning with the same text is said again (with its count) only this often
COALESCE_S = 0.02          # after a change, what else comes this soon is heard before the replan
THREADS = 1                # a drain's threads, whatever it drains (the benches count against it)


class DrainRunner(AroundTheServer):
    def __init__(self, spec: DrainSpec, make_api: Callable[[], KubeApi], report: Callable[[Report], None],
                 inputs: Inputs | None = None, clock: Callable[[], float] = time.time) -> None:
        self.spec = spec
        self._make_api = make_api
        self._report_fn = report
        self._io: DrainIO | None = None   # the drain's sockets, once it evicts (woken from the loop)
        self._kept: list[tuple[str, Answer]] = []   # answers heard while waiting, for the book
        self._inputs = inputs or Inputs()
        self._clock = clock   # the wall clock: deadlines, timestamps; intervals are on mono()
        self._stop = threading.Event()
        self._steps = set(spec.steps_done)
        self._memo = copy.deepcopy(spec.memo)
        if self._memo.reported_for != spec.notice_id:
            # Taken over (or an older record): the blocked pods are said again, under this notice.
            self._memo.reported, self._memo.reported_for = list(self._memo.reported_by(spec.notice_id)), spec.notice_id
        self._health = ApiHealth()
        self._rand = random.Random(spec.notice_id + spec.kind).random
        self._evicted = 0
        self._phase = ""
        self.crashed = ""   # what ended it, if an exception nobody foresaw did (the scheduler restarts it)
        self._fallback_refused = False   # its marker could not be saved: not run, not tried again
        self._unmarked_count = itertools.count(1)   # pods deleted without their DisruptionTarget
        self._why_deleted = (f"deleted by sco-agent: its PodDisruptionBudget blocked eviction past the cutoff of "
                             f"{spec.kind} notice {spec.notice_id} (deadline {spec.deadline_text})")
        # Coordinator thread only (the workers report through the answers queue).
        self._warnings: Recorder[str] = Recorder(lambda name, data: self._report(Log(spec.notice_id, name, data)),
                                  WARN_REPEAT_S, mono)
        self._thread = threading.Thread(target=self._main, name=f"drain-{spec.notice_id[:16]}", daemon=True)

    # -- control (from the loop) -------------------------------------------------------
    @property
    def inputs(self) -> Inputs:
        return self._inputs

    @inputs.setter
    def inputs(self, value: Inputs) -> None:
        """Replaced whole by the loop (an atomic reference swap), and the drain woken to act on it."""
        self._inputs = value
        self._wake()

    def start(self) -> DrainRunner:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake()   # the drain waits for answers: it stops at once

    def _wake(self) -> None:
        io = self._io
        if io is not None:
            io.wake()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- reporting ------------------------------------------------------------------------
    def _report(self, r: Report) -> None:
        self._report_fn(r)

    def _set_phase(self, phase: str) -> None:
        if phase != self._phase:
            self._phase = phase
            self._report(InPhase(self.spec.notice_id, phase))

    def _warn(self, name: str, error: str) -> None:
        """Said again with its count once WARN_REPEAT_S has passed (common/recorder.py), not per retry."""
        text = error[:300]
        self._warnings.record(name, text, {"error": text})

    def _step(self, step: str, event: EventType | None = None, **data: Any) -> None:
        self._steps.add(step)
        self._report(StepDone(self.spec.notice_id, step, event, data))

    def _wait(self, seconds: float) -> None:
        """Wait (a retry's pause, a probe's) -- serving the drain's sockets meanwhile, once it has
        them: the watches go on (a failed one is retried), the answers are kept for the book."""
        self._warnings.tick()
        io = self._io
        if io is None:
            if self._stop.wait(max(0.0, seconds)):
                raise Stopped()
            return
        until = mono() + max(0.0, seconds)
        while not self._stop.is_set():
            left = until - mono()
            if left <= 0:
                return
            answers, _ = io.poll(left)
            self._kept.extend(answers)
        raise Stopped()

    # -- the recipe -----------------------------------------------------------------------
    def _main(self) -> None:
        try:
            api = self._make_api()
        except Exception as e:  # noqa: BLE001 -- as below: said, and started again after a pause
            self.crashed = f"{type(e).__name__}: {e}"[:500]
            self._report(Log(self.spec.notice_id, "drain.crashed", {"error": self.crashed}))
            return
        try:
            if self.spec.dry_run:   # read only, one plan, an end of its own kind
                plan = last_resort.dry_run_plan(self.spec, api, self.inputs, self._clock, self._wait, self._pdbs_of)
                for r in last_resort.dry_run_reports(self.spec, plan):
                    self._report(r)
                return
            self._node_steps(api)
            if self.spec.cordon_only:
                self._report(NewState(self.spec.notice_id, DrainState.CORDONED_ONLY))
                return
            self._spread_evictions(api.node)
            self._evict_all(api)
        except Stopped:
            pass
        except Exception as e:  # noqa: BLE001 -- report, and let the loop start a new runner
            self.crashed = f"{type(e).__name__}: {e}"[:500]   # set first: the loop may see the thread end
            self._report(Log(self.spec.notice_id, "drain.crashed", {"error": self.crashed}))
        finally:
            self._warnings.tick(force=True)
            api.close()

    def _call_node(self, api: KubeApi, fn: Callable[[], Any]) -> Any:
        """One node call, retried until it is answered; goes around a server that is down."""
        throttles = 0
        while True:
            try:
                result = fn()
                self._health.ok()
                return result
            except Unreachable as e:
                self._unanswered(api, str(e))
            except CredentialsRefused as e:
                self._config_error(str(e))
            except Throttled as e:
                throttles += 1
                self._warn("drain.throttled", str(e))
                self._wait(pacing.throttled_delay(throttles, e.retry_after, self._rand))
                continue
            except (KubeError, NotOwnNode) as e:
                self._warn("drain.node_step_failed", str(e))
            self._wait(RETRY_S)

    def _config_error(self, error: str) -> None:
        """Not an outage: the server answered, and refused who we are (or we refused its certificate)."""
        self._health.ok()
        self._report(Problem(self.spec.notice_id, error[:300]))

    def _spread_evictions(self, node: str) -> None:
        """The hall's agents got their notices in the same second: each cordons at once (the write
        that stops new pods landing), then starts its evictions at its own offset in the spread."""
        if not (self.spec.memo.evicted or self.spec.memo.deleted):   # a restarted drain had begun: go on
            self._wait(pacing.eviction_spread_delay(node, self.spec.write_spread_s))

    def _node_steps(self, api: KubeApi) -> None:
        """Label, cordon and taint. Done again by a drain that takes over (or restarts) even when the
        record says it is done: idempotent, and the taint value and the annotation name this notice."""
        s = self.spec
        if s.exclude_from_lb:
            if Step.LB_EXCLUDED not in self._steps:
                self._set_phase(Phase.CORDON)
            self._call_node(api, lambda: node_steps.exclude_from_lb(api))
            if Step.LB_EXCLUDED not in self._steps:
                self._step(Step.LB_EXCLUDED)
        if Step.CORDONED not in self._steps:
            self._set_phase(Phase.CORDON)
        done = self._call_node(api, lambda: node_steps.cordon_and_taint(
            api, s.taint_key, s.kind, s.notice_id, s.deadline_text, s.source))
        if Step.CORDONED not in self._steps:
            self._step(Step.CORDONED, "drain.cordoned", taint_key=s.taint_key,
                       lb_excluded=Step.LB_EXCLUDED in self._steps, **done)

    def _evict_all(self, api: KubeApi) -> None:
        s = self.spec
        book = EvictionBook(s.ends, s.received_at, s.pdb_blocked, evicted=frozenset(s.memo.evicted),
                            deleted=frozenset(s.memo.deleted), reported=frozenset(self._memo.reported),
                            rules=s.pod_rules, rand=self._rand)
        io = self._io = DrainIO(api, rand=self._rand, mark=self._disruption_target, unmarked=self._unmarked)
        try:
            if self._stop.is_set():   # stopped before the selector could be woken
                raise Stopped()
            # The node's pods come from a watch, not from a LIST every turn (node_listing).
            listing = NodeListing(io, self._warn, must_leave=must_leave_under(s.pod_rules), rand=self._rand)
            self._drain(book, listing, io, api)
        finally:
            self._io = None
            io.close()

    def _drain(self, book: EvictionBook, listing: NodeListing, io: DrainIO, api: KubeApi) -> None:
        s = self.spec
        last_remaining: list[str] | None = None
        while True:
            if self._stop.is_set():
                raise Stopped()
            at = moment(self._clock)
            if at.wall > s.deadline + LINGER_S:
                self._report(NewState(s.notice_id, DrainState.ENDED))
                return
            sight = self._look(listing, api, at.mono, book.waited_on())
            if sight is None:
                last_remaining = None   # said what went wrong meanwhile: say what is left again
                continue
            if sight.pods is None:   # the first list is not in yet
                self._exchange(book, io, next_turn(at, IDLE_TURN_S, s.ends, s.deadline + LINGER_S))
                continue
            book.observe(sight.pods, sight.pdbs, at, sight.budgets)
            listing.poll.poke(book.take_left_under(), at.mono)
            remaining = book.remaining()
            if remaining != last_remaining:
                self._report(Remaining(s.notice_id, tuple(remaining)))
                last_remaining = remaining
            if book.empty() and not book.in_flight() and sight.confirmed:
                self._step(Step.NODE_EMPTY, "drain.node_empty", evicted=len(self.spec.memo.evicted) + self._evicted,
                           skipped=sorted(key for key, _ in book.plan.skipped.values()))
                self._report(NewState(s.notice_id, DrainState.DONE))
                return
            self._set_phase(Phase.CHECKPOINT if book.holding(at.wall, self.inputs) else Phase.EVICT)
            # The next turn comes by the next PDB read due, if sooner (the reads are made by turns).
            self._exchange(book, io, MonoTime(min(next_turn(at, IDLE_TURN_S, s.ends, s.deadline + LINGER_S),
                                                  listing.poll.next_moment())))

    def _look(self, listing: NodeListing, api: KubeApi, now: MonoTime,
              waited_on: frozenset[str]) -> Sight | None:
        """The node as the listing sees it now, or None (after the wait) if it could not say."""
        try:
            sight = listing.look(now, waited_on)
            self._health.ok()
            return sight
        except Unreachable as e:
            self._unanswered(api, str(e))
            self._wait(RETRY_S)
        except Throttled as e:
            self._warn("drain.throttled", str(e))
            self._wait(pacing.throttled_delay(1, e.retry_after, self._rand))
        except CredentialsRefused as e:
            self._config_error(str(e))
            self._wait(RETRY_S)
        except KubeError as e:
            self._warn("drain.list_failed", str(e))
            self._wait(RETRY_S)
        return None

    def _exchange(self, book: EvictionBook, io: DrainIO, until: float) -> None:
        """Send what the book says, feed it the answers, until the next listing is due (monotonic)
        or a watch saw a change (or the inputs did): then replan, once for however many came together."""
        kept, self._kept = self._kept, []
        for uid, answer in kept:
            self._take_answer(book, uid, answer)
        while True:
            at = moment(self._clock)
            actions, emits = book.next_actions(at, self.inputs, self.spec.workers)
            self._forward(emits)
            for a in actions:
                io.send(a)
            if at.mono >= until:
                return
            due = book.next_due(at.mono)
            wake = until if due is None else max(at.mono, min(until, due))
            if self._heard(book, io, max(0.0, wake - at.mono)):
                # A change comes in a burst (a pod's deletion, its PDB's new status, the next pod's):
                # hear the rest of it before the replan, so one replan serves the burst.
                settle = mono() + COALESCE_S
                while (left := settle - mono()) > 0:
                    self._heard(book, io, left)
                return

    def _heard(self, book: EvictionBook, io: DrainIO, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for the drain's sockets; the answers to the book, the watches'
        crashes said; True if a watch saw a change (or the loop's inputs did)."""
        answers, changed = io.poll(timeout_s)
        for crash in io.take_crashes():
            self._report(Announce(self.spec.notice_id, "agent.thread_restarted", {
                "thread": f"drain-{self.spec.notice_id[:16]}/{crash.thread}", "error": crash.error,
                "restarts": crash.restarts, "pause_s": crash.pause_s}))
        for uid, answer in answers:
            self._take_answer(book, uid, answer)
        if self._stop.is_set():
            raise Stopped()
        return changed

    def _take_answer(self, book: EvictionBook, uid: str, answer: Answer) -> None:
        if answer.outcome == "unreachable":
            self._health.failed(mono())
        else:
            self._health.ok()
        self._forward(book.answer(uid, answer, moment(self._clock), self._rand()))

    def _forward(self, emits: list[Emit]) -> None:
        """The book's events to the loop; what a restart must not do again goes into the memo."""
        for e in emits:
            nid, uid, pod = self.spec.notice_id, str(e.data.get("uid", "")), str(e.data.get("pod", ""))
            self._report(Announce(nid, e.event, e.data))
            if e.event in ("drain.evicted", "drain.deleted"):
                step = Step.EVICTED if e.event == "drain.evicted" else Step.DELETED
                if step == Step.EVICTED:
                    self._evicted += 1
                (self._memo.evicted if step == Step.EVICTED else self._memo.deleted)[uid] = pod
                self._report(StepDone(nid, step))
            elif e.event == "drain.eviction_blocked":
                self._memo.reported.append(uid)
            else:
                continue
            self._report(Remember(nid, self._memo.to_dict()))

    def _pdbs_of(self, api: KubeApi, pods: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """The PDBs of the namespaces these pods are in (a dry run's one read), None if unreadable."""
        try:
            return api.list_pdbs(namespaces_of(pods))
        except KubeError as e:
            # Typically 403: the identity may not read PDBs. Plan by owner instead (see drain_plan).
            self._warn("drain.pdbs_unreadable", str(e))
            return None

    def _disruption_target(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The ``DisruptionTarget`` patch a pod gets before the agent deletes it (None: it has one)."""
        return conditions.disruption_target_patch(pod, self._clock(), self._why_deleted)

    def _unmarked(self, pod: dict[str, Any], error: str) -> None:
        """A pod deleted without its DisruptionTarget (the status write failed): said and counted (the
        drain's thread: ``DrainIO`` calls it when the mark's answer lands, before it sends the delete)."""
        md = pod.get("metadata") or {}
        self._report(Announce(self.spec.notice_id, "drain.disruption_target_failed", {
            "pod": f"{md.get('namespace', '')}/{md.get('name', '')}", "uid": str(md.get("uid", "")),
            "error": error, "count": next(self._unmarked_count)}))
