"""Drive a DrainRunner directly against an API server (emulated or real) and watch its reports."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from common.wire import Budget, phase_ends
from executor.kube.api import KubeApi
from executor.kube.book_records import Inputs
from executor.kube.drain_spec import DrainSpec
from executor.kube.runner import DrainRunner
from executor.scheduler import Announce, NewState, Report, StepDone
from tests.support.wait import wait_for

NODE = "node-a"
OTHER = "node-b"
TAINT_KEY = "sco.io/notice"


def make_spec(*, deadline_in: float = 60.0, checkpoint_s: float = 0.0, evict_s: float = 40.0,
              margin_s: float = 5.0, **kw: Any) -> DrainSpec:
    now = time.time()
    fields: dict[str, Any] = {
        "notice_id": "n-test", "kind": "reclaim", "deadline": now + deadline_in,
        "deadline_text": "2030-01-01T00:00:00Z", "received_at": now,
        "ends": phase_ends(now, now + deadline_in, Budget(checkpoint_s + evict_s + margin_s, checkpoint_s, evict_s,
                                                           margin_s)),
        "taint_key": TAINT_KEY, "cordon_only": False, "pdb_blocked": "report", "exclude_from_lb": False,
        "down_after_s": 0.5}
    return DrainSpec(**{**fields, **kw})


class Drain:
    """A started runner and everything it reported (appended from its threads)."""

    def __init__(self, make_api: Callable[[], KubeApi], spec: DrainSpec, inputs: Inputs | None = None) -> None:
        self.spec = spec
        self.reports: list[Report] = []
        self.runner = DrainRunner(spec, make_api, self._report, inputs).start()

    def _report(self, r: Report) -> None:
        """As the executor's loop does: a Remember that waits for the disk is let go once kept."""
        self.reports.append(r)
        saved = getattr(r, "saved", None)
        if saved is not None:
            saved.set()

    def events(self, event: str) -> list[dict[str, Any]]:
        return [r.data for r in list(self.reports) if isinstance(r, (Announce, StepDone)) and r.event == event]

    def steps(self) -> list[str]:
        """The drain's steps, in order (not the per-pod evicted/deleted times)."""
        return [r.step for r in list(self.reports) if isinstance(r, StepDone) and r.step not in ("evicted", "deleted")]

    def state(self) -> str | None:
        states = [r.state for r in list(self.reports) if isinstance(r, NewState)]
        return states[-1] if states else None

    def wait_state(self, state: str, timeout: float = 20.0) -> None:
        wait_for(lambda: self.state() == state, timeout, f"drain state {state} (reports: {self.summary()})")

    def wait_event(self, event: str, timeout: float = 20.0) -> dict[str, Any]:
        return wait_for(lambda: (self.events(event) or [None])[0], timeout, f"event {event} ({self.summary()})")

    def summary(self) -> list[str]:
        return [f"{type(r).__name__}:{getattr(r, 'step', '') or getattr(r, 'event', '')}"
                for r in list(self.reports)][-30:]

    def stop(self) -> None:
        self.runner.stop()
        self.runner.join(10)
