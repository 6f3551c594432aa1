"""Chaos drains on a Slurm node: the real one-node cluster (tests/rigs/slurm_rig.py).

Each drain starts one batch job that logs every SIGUSR1 (the contract's checkpoint
signal) to a file, then either exits (``checkpoint``) or keeps running until the
requeue at the checkpoint cutoff (``keep_running``). Faults are SIGKILLs of the
agent's programs (the executor most of all) and slurmctld stopped and started
again. After the verdict: the node DRAINed and no job left on it (done); the job
signalled at most once; every Slurm command the executor logged named this node
only. The notice is then withdrawn (the agent must RESUME its own drain) and the
rig reset for the next drain.
"""
from __future__ import annotations

import os
from typing import Any

import ujson

from tests.chaos.invariants import Observed
from tests.chaos.plan import DrainPlan
from tests.chaos.runner import SPOOL_POLL_S, ChaosRun
from tests.executor.slurm.harness import nodes_named
from tests.rigs.slurm_rig import SlurmRig
from tests.support.wait import wait_for

# Schedule every second (not on Slurm's 30-60 s timers), as tests/executor/slurm/conftest.py does.
FAST_SCHEDULING = {"SchedulerParameters": "sched_interval=1,bf_interval=1"}
POLICY = {"signal": "SIGUSR1", "signal_scope": "batch", "on_drain": "requeue"}
JOBS = {
    # Saves on USR1 and exits 0: the node empties well before the cutoff.
    "checkpoint": """#!/bin/bash
trap 'echo usr1 >> "{signals}"; kill $child; exit 0' USR1
echo $$ > "{started}.tmp" && mv "{started}.tmp" "{started}"
sleep 300 & child=$!
wait $child
""",
    # Logs USR1 and keeps running: only the requeue at the checkpoint cutoff moves it off.
    "keep_running": """#!/bin/bash
trap 'echo usr1 >> "{signals}"' USR1
echo $$ > "{started}.tmp" && mv "{started}.tmp" "{started}"
while true; do sleep 300 & wait $!; done
""",
}
UNDO_WITHIN_S = 30.0
DRAINED = ("drained", "draining", "drained*", "draining*")


class SlurmChaos(ChaosRun):
    scheduler = "slurm"

    def __init__(self, base: str, seed: int, timing: Any, rig: SlurmRig, **kw: Any) -> None:
        super().__init__(base, seed, timing, **kw)
        self.rig = rig
        self.work = ""
        self.log_from = 0

    @property
    def node(self) -> str:
        return self.rig.node_name

    def slurm_rig(self) -> SlurmRig:
        return self.rig

    def node_settings(self) -> dict[str, dict[str, Any]]:
        return {"node": {"name": self.rig.node_name, "scheduler": "slurm"}, "slurm": {"conf": self.rig.conf_path}}

    def contract_extra(self) -> dict[str, Any]:
        return {"slurm": POLICY}

    def prepare(self, plan: DrainPlan) -> None:
        rig = self.rig
        if not rig.controller_up():   # a controller fault of the last drain left it down
            rig.start_controller()
        rig.reset()
        self.work = os.path.join(self.base, f"job-{plan.index}")
        os.makedirs(self.work)
        started = os.path.join(self.work, "started")
        rig.sbatch(JOBS[plan.job].format(signals=self.signals_path, started=started), requeue=True)
        wait_for(lambda: os.path.exists(started), 30, "the job running")
        self.log_from = len(self.stack.agent.log("executor"))

    @property
    def signals_path(self) -> str:
        return os.path.join(self.work, "signals")

    def observe(self, plan: DrainPlan, notice_id: str, verdicts: tuple[dict[str, Any], ...]) -> Observed:
        rig = self.rig
        state = rig.node_state()
        left = tuple(str(j) for j in rig.jobs("R,CG,S"))
        extra = []
        try:
            with open(self.signals_path) as f:
                signals = f.read().split()
        except FileNotFoundError:
            signals = []
        if len(signals) > 1:
            extra.append(f"{notice_id}: the job got the checkpoint signal {len(signals)} times")
        commands = []
        for line in self.stack.agent.log("executor")[self.log_from:].splitlines():
            if '"slurm.command"' in line:
                try:
                    commands.append(tuple(ujson.loads(line)["argv"]))
                except (ValueError, KeyError):
                    continue
        others = nodes_named(commands) - {rig.node_name}
        if others:
            extra.append(f"{notice_id}: Slurm commands named other nodes {sorted(others)}")
        return Observed(notice_id, verdicts, plan.overrun_allowed(), state in DRAINED, left, tuple(extra))

    def reset(self, plan: DrainPlan, notice_id: str) -> list[str]:
        out = []
        self.withdraw(notice_id)
        try:
            undone = wait_for(lambda: next((e for e in self.events() if e["type"] == "drain.uncordoned"
                                            and e["notice_id"] == notice_id), None), UNDO_WITHIN_S,
                              "drain.uncordoned", interval=SPOOL_POLL_S)
            if undone["data"].get("action") != "resume":
                out.append(f"{notice_id}: withdrawn, but the agent did not resume its drain: {undone['data']}")
        except TimeoutError:
            out.append(f"{notice_id}: withdrawn, but no drain.uncordoned within {UNDO_WITHIN_S:g} s")
        self.stack.meta.sco_clear()
        return out
