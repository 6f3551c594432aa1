"""Going around the API server: the fallback command, and what a dry run says it would do.

The decision to run it is ``drain_plan.fallback_due`` (pure); the runner calls ``run_command``
at most once per notice and records the step before anything else can repeat it.
"""
from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from common.timefmt import format_rfc3339
from common.wire import DrainState
from executor.kube import conditions
from executor.kube.api import KubeApi, KubeError, Unreachable
from executor.kube.drain_plan import DOWN_AFTER_CALLS, dry_run_steps
from executor.scheduler import Announce, NewState, Report

if TYPE_CHECKING:
    from common.pod_policy import Rules
    from common.wire import PhaseEnds
    from executor.kube.book_records import Inputs


class DrainSpec(Protocol):
    """What is read here of the runner's ``DrainSpec`` (executor.kube.runner imports this module)."""

    @property
    def notice_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def taint_key(self) -> str: ...
    @property
    def exclude_from_lb(self) -> bool: ...
    @property
    def ends(self) -> PhaseEnds: ...
    @property
    def fallback_command(self) -> tuple[str, ...]: ...
    @property
    def fallback_allowed(self) -> bool: ...
    @property
    def fallback_at(self) -> float: ...
    @property
    def pod_rules(self) -> Rules | None: ...
    @property
    def source(self) -> str: ...
    @property
    def deadline_text(self) -> str: ...

RETRY_S = 0.5

TIMEOUT_S = 30.0   # systemctl poweroff returns at once; anything slower is stuck


def run_command(command: Sequence[str]) -> dict[str, Any]:
    """Run the fallback (argv, no shell); what happened, for the drain.fallback event."""
    argv = list(command)
    if not argv:
        return {"command": [], "ran": False}
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=TIMEOUT_S, check=False)
        return {"command": argv, "ran": True, "exit": proc.returncode,
                "stderr": proc.stderr[-300:].decode("utf-8", "replace")}
    except (OSError, subprocess.SubprocessError) as e:
        return {"command": argv, "ran": False, "error": str(e)[:300]}


def would_fall_back(spec: DrainSpec) -> dict[str, Any]:
    """What a dry run says of the fallback: the command, whether it could run, and from when."""
    if not spec.fallback_command:
        why = "kubernetes.fallback_command is empty"
    elif not spec.fallback_allowed:
        why = f"the contract allows no fallback for a {spec.kind} notice"
    else:
        why = ""
    return {"command": list(spec.fallback_command), "possible": not why, "why_not": why,
            "if_unreachable_at": format_rfc3339(spec.fallback_at) if not why else None}


def dry_run_plan(spec: DrainSpec, api: KubeApi, inputs: Inputs, clock: Callable[[], float],
                 wait: Callable[[float], None],
                 pdbs: Callable[[KubeApi, list[dict[str, Any]]], list[dict[str, Any]] | None],
                 ) -> dict[str, Any]:
    """The one plan a dry run spools: cordon, taint, the node's condition, each pod in order with its
    grace and phase, and the fallback. Reads only (a few tries); ``pods`` None when the server did not answer."""
    plan: dict[str, Any] = {
        "cordon": True, "taint": {"key": spec.taint_key, "value": spec.kind, "effect": "NoSchedule"},
        "condition": {"type": conditions.NOTICE_SCHEDULED, "status": "True", "reason": conditions.camel_case(spec.kind),
                      "message": conditions.notice_message(spec.notice_id, spec.source, spec.deadline_text)},
        "exclude_from_lb": spec.exclude_from_lb, "pods": None, "fallback": would_fall_back(spec)}
    for attempt in range(DOWN_AFTER_CALLS):
        try:
            pods = api.list_pods()
            plan["pods"] = dry_run_steps(pods, pdbs(api, pods), clock(), spec.ends, inputs.held, inputs.hold_all,
                                         rules=spec.pod_rules)
            plan.pop("unreadable", None)
            return plan
        except (Unreachable, KubeError) as e:
            plan["unreadable"] = str(e)[:300]
            if attempt + 1 < DOWN_AFTER_CALLS:
                wait(RETRY_S)
    return plan



def dry_run_reports(spec: DrainSpec, plan: dict[str, Any]) -> list[Report]:
    """What a dry run says once it has read: the plan, the fallback it would have run if the
    server did not answer, and its end (the state ``dry_run``; nothing was written)."""
    out: list[Report] = []
    if plan["pods"] is None:   # a real drain would wait for the server, and then maybe do this
        out.append(Announce(spec.notice_id, "drain.dry_run", {"action": "fallback", **plan["fallback"]}))
    return [*out, Announce(spec.notice_id, "drain.plan", plan), NewState(spec.notice_id, DrainState.DRY_RUN)]
