"""The verifier's escalation levels, as the executor hears them on ``verifier.pub``.

The verifier owns the deadline clock and announces, level-triggered, how far
past each cutoff a notice is: ``{"notices": {id: {"level": "checkpoint_over" |
"evict_over" | "final", "since": epoch}}}``. The executor uses the level as a
second opinion on its own cutoffs (a restarted executor, a skewed budget):
whichever says "later phase" first wins.

The executor subscribes once (for either scheduler) and keeps ``parse``'s
result; the Slurm and Kubernetes paths read their notice's level from it.
"""
from __future__ import annotations

from typing import Any

from common import ipc

LEVELS = ("checkpoint_over", "evict_over", "final")


def parse(body: dict[str, Any]) -> dict[str, str]:
    """notice id -> level from one ``escalate`` message; unknown levels and shapes are skipped."""
    notices = body.get("notices")
    if not isinstance(notices, dict):
        raise ipc.BadMessage("escalate: 'notices' is not an object")
    out = {}
    for nid, value in notices.items():
        level = value.get("level") if isinstance(value, dict) else value
        if level in LEVELS:
            out[str(nid)] = level
    return out
