"""Drains under faults, one after another on one running agent: the part both schedulers share.

A ``ChaosRun`` owns a started ``tests.support.stack.Stack`` (real supervisord, nats-server,
the metadata, API-server and Vector emulators, the state dir on a small tmpfs).
For each ``DrainPlan`` it publishes a notice (relay, metadata or both), carries
the faults out at their moments, waits for the agent to be whole again and the
verdict to be in the spool, checks the drain's invariants (``observe``, per
scheduler), and withdraws the notice so the node is ready for the next drain.
``finish`` checks the run as a whole: every spooled event reached Vector, and
every notice still has exactly one verdict.
"""
from __future__ import annotations

import glob
import io
import os
import shutil
import time
from collections.abc import Callable
from contextlib import ExitStack, redirect_stdout
from typing import Any, Self

import ujson

from spool.reader import iter_records, read_stats
from tests.chaos import invariants
from tests.chaos.inject import Injector, tmpfs, unfill
from tests.chaos.invariants import Observed
from tests.chaos.plan import DrainPlan, Fault, Timing
from tests.chaos.report import Tally
from tests.support.agent_rig import PROGRAMS
from tests.support.stack import HALL, Stack
from tests.support.wait import wait_for

TMPFS_MB = 12           # the state dir: the spool file (SPOOL_MB) and the verifier's and watcher's files
SPOOL_MB = 8
VERDICT_AFTER_DEADLINE_S = 30.0   # a verdict must be in by then (overrun waits for the cutoff only)
WHOLE_AGAIN_S = 60.0
SHIPPED_WITHIN_S = 120.0
SPOOL_POLL_S = 0.25               # each look reads the spool file through: not every 50 ms
RELAY_WITHIN_S = 30.0             # the watcher retries every second
RELAY_STATES = ("process.started", "relay.connected", "relay.reconnected", "relay.disconnected", "relay.closed")          # the shipper's backoff reaches 30 s while Vector is down


def settings(extra: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    base: dict[str, dict[str, Any]] = {
        "kubernetes": {"fallback_command": ["true"], "timeout_s": 2.0},
        "metadata": {"poll_interval_s": 0.5, "timeout_s": 1.0},
        "spool": {"size_mb": SPOOL_MB},
    }
    for section, table in (extra or {}).items():
        base.setdefault(section, {}).update(table)
    return base


class ChaosRun:
    scheduler = ""

    def __init__(self, base: str, seed: int, timing: Timing, say: Callable[[str], None] = print,
                 extra_settings: dict[str, dict[str, Any]] | None = None) -> None:
        self.base = base
        self.timing = timing
        self.say = say
        self.extra_settings = extra_settings
        self.tally = Tally(self.scheduler, seed)
        self.notices: list[str] = []
        self.stack: Stack | None = None
        self.injector: Injector | None = None
        self._exit = ExitStack()
        self._started = 0.0
        self._landed: set[int] = set()   # faults of the current drain applied and not yet reverted
        self.disk = False                # the state dir is a tmpfs of its own (disk_full can land)

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self._started = time.monotonic()
        try:
            self.disk = self._exit.enter_context(tmpfs(os.path.join(self.base, "agent", "state"), TMPFS_MB))
            with redirect_stdout(io.StringIO()):   # the contract tool's chatter would break up the table
                self.stack = self._exit.enter_context(
                    Stack(self.base, provider="sco", vector=True, contract=self.timing.contract(),
                          contract_extra=self.contract_extra(),
                          settings=settings(self.node_settings() | (self.extra_settings or {}))))
            self.injector = Injector(self.stack, self.slurm_rig(), self.disk)
            self.prepare_run()
        except BaseException:
            self._exit.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.stack is not None and self.stack.agent is not None:
                unfill(self.stack.agent.state_dir)
                if os.path.exists(self.stack.spool_path):   # the tmpfs goes: keep the record for a post-mortem
                    shutil.copyfile(self.stack.spool_path, os.path.join(self.base, "spool.dat"))
        finally:
            self._exit.close()

    # -- per scheduler ----------------------------------------------------------------------
    def node_settings(self) -> dict[str, dict[str, Any]]:
        return {}

    def contract_extra(self) -> dict[str, Any]:
        return {}

    def slurm_rig(self) -> Any:
        return None

    @property
    def node(self) -> str:
        raise NotImplementedError

    def prepare_run(self) -> None:
        """Once, after the stack is up."""

    def prepare(self, plan: DrainPlan) -> None:
        """Before the notice: put the work on the node."""

    def observe(self, plan: DrainPlan, notice_id: str, verdicts: tuple[dict[str, Any], ...]) -> Observed:
        raise NotImplementedError

    def reset(self, plan: DrainPlan, notice_id: str) -> list[str]:
        """After the checks: back to a clean node; violations of the withdrawal itself."""
        return []

    # -- one drain ----------------------------------------------------------------------------
    def run(self, plans: list[DrainPlan]) -> Tally:
        for plan in plans:
            self.drain(plan)
        self.finish()
        return self.tally

    def drain(self, plan: DrainPlan) -> list[str]:
        s = self.stack
        assert s is not None
        nid = f"chaos-{self.scheduler}-{self.tally.seed}-{plan.index}"
        self.prepare(plan)
        doc = s.notice_payload(deadline_in=plan.timing.deadline_s, node=self.node, notice_id=nid)
        if plan.channel != "metadata":
            # NATS core keeps nothing for a subscriber that is not there: after a nats-server or watcher
            # restart the relay notice waits until the watcher has subscribed again.
            wait_for(self.relay_subscribed, RELAY_WITHIN_S, "the watcher subscribed to the relay")
        steps = self._steps(plan.faults)
        # A fault planned at a negative moment is in place before the notice is published.
        published = time.monotonic() + max([0.0] + [-f.at for f in plan.faults])
        self._carry_out([st for st in steps if st[0] < 0], published)
        self._publish(doc, plan.channel)
        self.notices.append(nid)
        self._carry_out([st for st in steps if st[0] >= 0], published)
        wait_for(s.agent.all_running, WHOLE_AGAIN_S, "every program RUNNING after the faults")
        left = published + plan.timing.deadline_s + VERDICT_AFTER_DEADLINE_S - time.monotonic()
        try:
            verdicts = wait_for(lambda: invariants.verdicts_of(self.events(), nid), max(left, 5.0),
                                f"a verdict for {nid}", interval=SPOOL_POLL_S)
        except TimeoutError:
            verdicts = ()
        obs = self.observe(plan, nid, verdicts)
        violations = invariants.check(obs)
        violations += self.reset(plan, nid)
        self._count(plan, obs, violations)
        return violations

    def relay_subscribed(self) -> bool:
        """Is the watcher's last word on the relay 'connected' (since it last started)?"""
        assert self.stack is not None
        last = ""
        for line in self.stack.agent.log("watcher").splitlines():
            for msg in RELAY_STATES:
                if f'"msg":"{msg}"' in line:
                    last = msg
        return last in ("relay.connected", "relay.reconnected")

    def _publish(self, doc: dict[str, Any], channel: str) -> None:
        s = self.stack
        assert s is not None
        if channel in ("metadata", "both"):
            # Level-triggered: served until withdrawn, so a watcher down at this moment still learns it.
            s.meta.sco_notice(**{k: doc[k] for k in ("id", "kind", "node", "instance_id", "issued_at", "source")},
                              at=doc["deadline"])
        if channel in ("relay", "both"):
            s.nats.publish(f"sco.notice.{HALL}.{self.node.replace('.', '_')}", ujson.dumps(doc).encode())

    def withdraw(self, notice_id: str) -> None:
        """Cancel on both channels (the metadata endpoint keeps serving it until the next notice)."""
        s = self.stack
        assert s is not None
        doc = s.notice_payload(deadline_in=self.timing.deadline_s, kind="cancel", node=self.node,
                               notice_id=notice_id)
        self._publish(doc, "both")

    @staticmethod
    def _steps(faults: tuple[Fault, ...]) -> list[tuple[float, int, int, Fault]]:
        """(moment, 0 apply | 1 revert, index, fault), in order; instant faults have no revert."""
        return sorted([(f.at, 0, i, f) for i, f in enumerate(faults)] +
                      [(f.end, 1, i, f) for i, f in enumerate(faults) if f.duration > 0])

    def _carry_out(self, steps: list[tuple[float, int, int, Fault]], t0: float) -> None:
        assert self.injector is not None
        for at, op, i, f in steps:
            delay = t0 + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if op == 0:
                if self.injector.apply(f):
                    self._landed.add(i)
                    self.tally.faults[f.kind] += 1
                else:
                    self.tally.skipped[f.kind] += 1
            elif i in self._landed:
                self._landed.discard(i)
                self.injector.revert(f)

    def _count(self, plan: DrainPlan, obs: Observed, violations: list[str]) -> None:
        t = self.tally
        t.drains += 1
        t.overrun_allowed += int(plan.overrun_allowed())
        kinds = [e["type"].removeprefix("drain.") for e in obs.verdicts]
        t.verdicts[kinds[0] if len(kinds) == 1 else ("none" if not kinds else "several")] += 1
        t.violations += violations
        faults = ", ".join(f"{f.kind}@{f.at:g}" + (f"+{f.duration:g}" if f.duration else "") for f in plan.faults)
        self.say(f"[{self.scheduler} {plan.index:3d}] {'/'.join(kinds) or 'NO VERDICT':8s} "
                 f"faults: {faults or '-'}" + (f"  VIOLATIONS: {violations}" if violations else ""))

    # -- the whole run ---------------------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        """Every event the spool file still holds (shipped or not), oldest first."""
        assert self.stack is not None
        path = self.stack.spool_path
        out = []
        if not os.path.exists(path):
            return out
        for rec in iter_records(path, from_head=False):
            try:
                out.append(ujson.loads(rec.payload))
            except ValueError:
                continue
        return out

    def emitted(self) -> list[str]:
        """Every event id any program logged as emitted, over every start (and rotated log) of it."""
        assert self.stack is not None and self.stack.agent is not None
        log_dir = self.stack.agent.log_dir
        out: list[str] = []
        for program in PROGRAMS:
            for name in sorted(glob.glob(os.path.join(log_dir, f"{program}.log*")), reverse=True):
                with open(name, errors="replace") as f:
                    out += invariants.emitted_ids(f)
        return out

    def finish(self) -> None:
        """Once Vector has everything emitted: count what was lost from emission, recount the verdicts."""
        s = self.stack
        assert s is not None
        def shipped() -> bool:
            if read_stats(s.spool_path)["unshipped_records"]:
                return False
            return invariants.from_emission(self.emitted(), s.vector.records()).unaccounted == 0
        try:
            wait_for(shipped, SHIPPED_WITHIN_S, "every emitted event in Vector", interval=1.0)
        except TimeoutError as e:
            self.tally.violations.append(f"spool not shipped: {e}")
        spooled = self.events()
        received = s.vector.records()
        whole = invariants.from_emission(self.emitted(), received)
        t = self.tally
        t.events_emitted, t.emitted_delivered = whole.emitted, whole.delivered
        t.emitted_poisoned, t.emitted_dropped, t.emitted_lost = whole.poisoned, whole.dropped, whole.unaccounted
        if whole.unaccounted:
            t.violations.append(f"{whole.unaccounted} emitted events neither in Vector nor set aside nor counted "
                                f"dropped: {list(whole.missing[:5])}")
        lost = invariants.lost_events((e["event_id"] for e in spooled), (r.get("event_id") for r in received))
        self.tally.events_spooled = len(spooled)
        self.tally.events_lost = len(lost)
        self.tally.shipped_duplicates = sum(n - 1 for n in s.vector.stats()["duplicates"].values())
        if lost:
            self.tally.violations.append(f"{len(lost)} spooled events never reached Vector: {sorted(lost)[:5]}")
        if any(e["type"] == "spool.dropped" for e in spooled):
            self.tally.violations.append("the spool dropped unshipped events")
        everything = [*spooled, *received]
        for nid, n in invariants.verdict_counts(everything, self.notices).items():
            if n != 1:
                self.tally.violations.append(f"{nid}: {n} verdicts at the end of the run")
        repeated = invariants.repeated_steps(everything, self.notices)
        self.tally.violations += repeated
        for line in repeated:
            self.say(f"[{self.scheduler}] VIOLATION: {line}")
        self.tally.seconds = time.monotonic() - self._started
