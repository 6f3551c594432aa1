"""When a finished drain may be acknowledged to the provider (pure: no I/O, the clock passed in).

An Azure acknowledgement (``StartRequests``) lets the platform take the machine at once instead of
at ``NotBefore`` (Azure Scheduled Events). So it waits for more than the executor's "the node is
empty": for the verifier's verdict on the notice, which on Kubernetes waits, within the margin,
for the node's volumes to detach (DESIGN section 9; verifier/volumes.py) -- a machine taken with
a volume still attached leaves a StatefulSet's replacement waiting 6 minutes for a force detach
(aws-ebs-csi-driver #1955). A verifier that says nothing (down, restarting) holds it up only
until the margin after the node was empty, and ``VERDICT_SLACK_S`` for the verifier's own read,
has passed: late, never never. Whatever the verdict, it is passed on once (``AckGate.due``); the
provider's source keeps its own guard against a second acknowledgement (an event already
"Started" is not acknowledged again), which also holds across a restart of the watcher, whose
gate starts empty and hears the progress and the verdicts again within a second.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from common.wire import DrainRecord, DrainState, Step

# The verifier's own read after the executor's report (verifier.judge.VERIFY_WAIT_S), and a turn.
VERDICT_SLACK_S = 6.0
# The drains passed on that are remembered, newest kept: one id a finished drain, for as long as the
# watcher runs, would otherwise grow without end. The executor's progress carries its newest past
# records only (common.progress.PAST_SENT), so an older one does not come back to be passed on again;
# if it did, the provider's source refuses a second acknowledgement of an event already started.
MAX_PASSED = 4096


def ack_at(rec: DrainRecord, heard_at: float) -> float:
    """The latest a finished drain waits for its verdict: the margin after the node was empty
    (``heard_at``, when the watcher first heard it finished, if the record has no time for it)."""
    empty = rec.steps.get(Step.NODE_EMPTY, heard_at)
    return empty + rec.budget.margin_s + VERDICT_SLACK_S


@dataclass(slots=True)
class AckGate:
    """The finished drains waiting to be passed on, and those passed on (each once)."""

    waiting: dict[str, float] = field(default_factory=dict)   # id -> ack_at
    passed: dict[str, None] = field(default_factory=dict)     # an ordered set, oldest first

    def finished(self, records: dict[str, DrainRecord], now: float) -> None:
        """The executor's records: each drain now DONE starts waiting for its verdict."""
        for nid, rec in records.items():
            if rec.state == DrainState.DONE and nid not in self.passed and nid not in self.waiting:
                self.waiting[nid] = ack_at(rec, now)

    def due(self, judged: set[str] | dict[str, str], now: float) -> list[str]:
        """The drains to pass on now: judged by the verifier, or waited for past their ``ack_at``."""
        out = [nid for nid, at in self.waiting.items() if nid in judged or now >= at]
        for nid in out:
            del self.waiting[nid]
            self.passed[nid] = None
        while len(self.passed) > MAX_PASSED:
            del self.passed[next(iter(self.passed))]
        return out
