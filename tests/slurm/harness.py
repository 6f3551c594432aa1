"""Test doubles and job scripts for driving the Slurm drain recipe against the real rig in-process."""
from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable
from typing import Any

from common.contract import SlurmPolicy
from common.notice import Notice
from executor.slurm import SlurmCli
from executor.slurm_drain import Report, SlurmDrain
from tests.procutil import wait_for
from tests.rigs.slurm_rig import SlurmRig

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
    """Stands in for the executor: records steps and events, persists the record as JSON on save."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.saved: dict[str, Any] = {}
        self.rec: dict[str, Any] = {}

    def step(self, n: Notice, rec: dict[str, Any], step: str, event: str, data: dict[str, Any]) -> None:
        rec["steps"][step] = time.time()
        self.save()
        self.events.append((event, data))

    def event(self, type: str, nid: str, data: dict[str, Any], now: float) -> None:
        self.events.append((type, data))

    def save(self) -> None:
        self.saved = copy.deepcopy(self.rec)

    def of(self, type: str) -> list[dict[str, Any]]:
        return [d for t, d in self.events if t == type]

    def types(self) -> list[str]:
        return [t for t, _ in self.events]


def notice(rig: SlurmRig, deadline_in: float = 120.0, kind: str = "reclaim") -> Notice:
    now = time.time()
    return Notice(f"n-{uuid.uuid4().hex[:8]}", kind, rig.node_name, "", now, now + deadline_in, "sco",
                  received_at=now)


def record(n: Notice, checkpoint_s: int, evict_s: int, margin_s: int = 5, policy: str = "drain") -> dict[str, Any]:
    """The executor's record of a new drain (as executor/__main__.py creates it)."""
    return {"kind": n.kind, "state": "running", "steps": {}, "received_at": n.received_at, "remaining": None,
            "policy": policy, "taint_key": "sco.io/notice",
            "budget": {"budget_s": checkpoint_s + evict_s + margin_s, "checkpoint_s": checkpoint_s,
                       "evict_s": evict_s, "margin_s": margin_s}}


class Driver:
    """A SlurmDrain on the rig with a Recorder, stepped like the executor loop would step it."""

    def __init__(self, rig: SlurmRig, n: Notice, rec: dict[str, Any], policy: SlurmPolicy = POLICY,
                 levels: Callable[[str], str | None] | None = None) -> None:
        self.rig, self.n, self.policy = rig, n, policy
        self.out = Recorder()
        self.out.rec = rec
        self.commands: list[tuple[str, ...]] = []
        self.levels = levels
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
        self.drain = SlurmDrain(cli, Report(self.out.step, self.out.event, self.out.save),
                                **({"levels": self.levels} if self.levels else {}))

    def step(self) -> None:
        self.drain.step(self.n, self.rec, time.time(), self.policy)

    def until(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """Step every 0.1 s until ``predicate`` holds; TimeoutError naming ``what`` and the record."""
        def stepped() -> Any:
            self.step()
            return predicate()

        return wait_for(stepped, timeout, lambda: f"{what}; record {self.rec}; events {self.out.types()}",
                        interval=0.1, retry_on=())

    def withdraw(self, other_notices: bool = False, timeout: float = 10.0) -> None:
        """Call undo() as the executor loop does, until the record says withdrawn."""
        def undone() -> bool:
            if self.rec["state"] != "withdrawn":
                self.drain.undo(self.n.id, self.rec, time.time(), other_notices)
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
