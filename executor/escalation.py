"""The verifier's escalation levels, as the executor hears them on ``verifier.pub``.

The verifier owns the deadline clock and announces, level-triggered, how far
past each cutoff a notice is: ``{"notices": {id: {"level": "checkpoint_over" |
"evict_over" | "final", "since": epoch}}}``. The executor uses the level as a
second opinion on its own cutoffs (a restarted executor, a skewed budget):
whichever says "later phase" first wins.

``EscalationFeed`` is read without blocking from the executor's loop, so no
poller registration is needed: messages queue in the SUB socket until read.
"""
from __future__ import annotations

from typing import Any

import zmq

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


class EscalationFeed:
    """The latest escalation level of every notice, from the verifier's PUB socket."""

    def __init__(self, ctx: zmq.Context, runtime_dir: str) -> None:
        self.sock = ipc.subscriber(ctx, runtime_dir, ipc.VERIFIER_PUB, ipc.T_ESCALATE)
        self.levels: dict[str, str] = {}
        self.rejected = 0

    def level(self, notice_id: str) -> str | None:
        self._read()
        return self.levels.get(notice_id)

    def _read(self) -> None:
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                topic, body = ipc.decode(frames)
                if topic == ipc.T_ESCALATE:
                    # Level-triggered: each message is the whole state, so it replaces the last.
                    self.levels = parse(body)
            except ValueError:
                self.rejected += 1
