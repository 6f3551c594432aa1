"""Test doubles and job scripts for driving the Slurm drain recipe against the real rig in-process."""
from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from common.clock import moment
from common.contract import BUILTIN, SlurmPolicy
from common.notice import Notice
from common.wire import DrainRecord
from executor.scheduler import Announce, InPhase, NewState, Order, Remaining, Report, StepDone, Withdrawal
from executor.slurm.cli import SlurmCli
from executor.slurm.recipe import SlurmDrain, Tracked
from tests.rigs.slurm_rig import SlurmRig
from tests.support import notices
from tests.support.drain_records import budget, record_dict
from tests.support.wait import wait_for

# Saves a checkpoint on USR1 and exits 0. bash runs a trap only after its foreground command
# returns, hence `sleep & wait`.
CHECKPOINT_JOB = """#!/bin/bash
trap 'echo saved > "{ckpt}"; kill $child; exit 0' USR1
echo $$ > "{started}.tmp" && mv "{started}.tmp" "{started}"
sleep 300 & child=$!
wait $child
"""

# Ignores every signal it can (children inherit the ignored dispositions): only SIGKILL ends it.
STUBBORN_JOB = """#!/bin/bash
trap '' USR1 TERM INT HUP
echo $$ > "{started}.tmp" && mv "{started}.tmp" "{started}"
sleep 300 & wait $!
"""

# Records each run (restart count and the checkpoint it found), checkpoints on USR1 and keeps running.
RESUMABLE_JOB = """#!/bin/bash
echo "${{SLURM_RESTART_COUNT:-0}} $(cat "{ckpt}" 2>/dev/null || echo none)" >> "{runs}"
trap 'echo step-42 > "{ckpt}.tmp" && mv "{ckpt}.tmp" "{ckpt}"' USR1
while true; do sleep 300 & wait $!; done
"""

POLICY = SlurmPolicy(signal="SIGUSR1", signal_scope="batch", on_drain="requeue")


class Recorder:
    """Stands in for the executor's drain core: applies the recipe's reports to the record (the wire
    form, a dict) and keeps what the core would have saved, as JSON, for a restart."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.saved: dict[str, Any] = {}
        self.rec: dict[str, Any] = {}

    def put(self, r: Report) -> None:
        if isinstance(r, StepDone):
            self.rec["steps"][r.step] = time.time()
            self.save()
            if r.event:
                self.events.append((r.event, r.data))
        elif isinstance(r, Announce):
            self.events.append((r.event, r.data))
        elif isinstance(r, Remaining):
            self.rec["remaining"] = list(r.items)
        elif isinstance(r, InPhase):
            self.rec["phase"] = r.phase
        elif isinstance(r, NewState):
            self.rec["state"] = r.state
            self.save()

    def remember(self, notice_id: str, memo: dict[str, Any]) -> None:
        self.rec.update(copy.deepcopy(memo))
        self.save()

    def save(self) -> None:
        self.saved = copy.deepcopy(self.rec)

    def of(self, type: str) -> list[dict[str, Any]]:
        return [d for t, d in self.events if t == type]

    def types(self) -> list[str]:
        return [t for t, _ in self.events]


def notice(rig: SlurmRig, deadline_in: float = 120.0, kind: str = "reclaim") -> Notice:
    """A fresh notice for the rig's node, as the hall sends it, heard now."""
    return notices.notice(notices.new_id(), kind, rig.node_name, deadline_in=deadline_in, received_in=0.0,
                          instance_id="", source="sco")


def record(n: Notice, checkpoint_s: int, evict_s: int, margin_s: int = 5, policy: str = "drain") -> dict[str, Any]:
    """The executor's record of a new drain (as the drain core starts it), in its wire form."""
    return record_dict(n, budget=budget(checkpoint_s, evict_s, margin_s), policy=policy)


def order(n: Notice, rec: dict[str, Any], policy: SlurmPolicy = POLICY, level: str | None = None) -> Order:
    """The order the drain core hands the scheduler for record ``rec`` (decoded as the core has it)."""
    r = DrainRecord.from_dict(copy.deepcopy(rec))
    return Order(notice_id=n.id, kind=n.kind, deadline=n.deadline, received_at=r.received_at, budget=r.budget,
                 ends=r.ends(n.deadline), cordon_only=r.policy != "drain", taint_key=r.taint_key,
                 pdb_blocked=r.pdb_blocked, exclude_from_lb=r.exclude_from_lb, steps_done=frozenset(r.steps),
                 memo=r.memo, level=level, contract=dataclasses.replace(BUILTIN, slurm=policy))


class Driver:
    """A SlurmDrain on the rig with a Recorder, stepped like the Slurm scheduler's worker steps it."""

    def __init__(self, rig: SlurmRig, n: Notice, rec: dict[str, Any], policy: SlurmPolicy = POLICY,
                 levels: Callable[[str], str | None] | None = None) -> None:
        self.rig, self.n, self.policy = rig, n, policy
        self.out = Recorder()
        self.out.rec = rec
        self.commands: list[tuple[str, ...]] = []
        self.levels = levels or (lambda nid: None)
        self.restart()

    @property
    def rec(self) -> dict[str, Any]:
        return self.out.rec

    def restart(self) -> None:
        """A fresh recipe on the last saved record: what a SIGKILLed and restarted executor sees."""
        if self.out.saved:
            self.out.rec = copy.deepcopy(self.out.saved)
        if getattr(self, "drain", None) is not None:
            self.commands += self.drain.cli.commands
        cli = SlurmCli(self.rig.node_name, self.rig.conf_path, timeout_s=12.0)
        self.drain = SlurmDrain(cli, self.out)
        self.tracked = Tracked.of(self._order())

    def _order(self) -> Order:
        return order(self.n, self.rec, self.policy, self.levels(self.n.id))

    def step(self) -> None:
        self.tracked.order = self._order()
        self.drain.step(self.tracked, moment())

    def until(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """Step every 0.1 s until ``predicate`` holds; TimeoutError naming ``what`` and the record."""
        def stepped() -> Any:
            self.step()
            return predicate()

        return wait_for(stepped, timeout, lambda: f"{what}; record {self.rec}; events {self.out.types()}",
                        interval=0.1, retry_on=())

    def withdraw(self, other_notices: bool = False, timeout: float = 10.0) -> None:
        """Call undo() as the scheduler's worker does, until the record says withdrawn."""
        def undone() -> bool:
            if self.rec["state"] != "withdrawn":
                o = self._order()
                self.drain.undo(Withdrawal(self.n.id, o.taint_key, o.steps_done, o.memo, other_notices), moment())
            return self.rec["state"] == "withdrawn"

        wait_for(undone, timeout, lambda: f"withdrawn; events {self.out.types()}", interval=0.1, retry_on=())

    def done(self) -> bool:
        return self.rec["state"] == "done"

    def all_commands(self) -> list[tuple[str, ...]]:
        return [*self.commands, *self.drain.cli.commands]


def nodes_named(commands: list[tuple[str, ...]]) -> set[str]:
    """Every node name a list of Slurm commands addressed (nodename=, -w, show node)."""
    names = set()
    for argv in commands:
        for i, arg in enumerate(argv):
            if arg.startswith("nodename="):
                names.add(arg.split("=", 1)[1])
            elif arg == "-w" or (arg == "node" and i and argv[i - 1] == "show"):
                names.add(argv[i + 1])
    return names


def start_job(rig: SlurmRig, script: str, tmp: Any, **opts: Any) -> tuple[int, Any]:
    """Submit ``script`` (formatted with started/ckpt/runs under ``tmp``) and wait until it runs."""
    started = tmp / "started"
    job = rig.sbatch(script.format(started=started, ckpt=tmp / "ckpt", runs=tmp / "runs"), **opts)
    marker = (tmp / "runs") if "{runs}" in script else started
    rig.wait_for(marker.exists, timeout=30, what=f"job {job} started")
    return job, started
