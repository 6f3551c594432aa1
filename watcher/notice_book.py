"""The watcher's pure core: which notices are active, whatever channel brought them.

``NoticeBook.observe`` decides what one incoming notice means -- new, a
duplicate of one we hold (same id, or the same reclaim seen on another
channel), a withdrawal, or not ours -- and the book is the level-triggered
state the watcher persists and re-announces. No I/O, clock passed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from common.notice import Notice, notice_from_dict

# Two channels report the same reclaim with deadlines that differ by rounding
# (IMDS gives whole seconds; a relay may carry milliseconds).
SAME_DEADLINE_TOLERANCE_S = 2.0
# How long a withdrawn id is remembered, so a late duplicate does not revive it.
WITHDRAWN_MEMORY_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """What observing one notice did. ``action``: new | duplicate | withdrawn | ignored."""

    action: str
    notice: Notice
    reason: str = ""
    earlier: Notice | None = None   # for a duplicate: the notice we already hold


@dataclass(slots=True)
class NoticeBook:
    """Active notices by id, plus recently withdrawn ids."""

    node: str
    active: dict[str, Notice] = field(default_factory=dict)
    withdrawn: dict[str, float] = field(default_factory=dict)
    gen: int = 0

    def observe(self, notice: Notice, now: float) -> Outcome:
        if notice.node not in (self.node, "*"):
            return Outcome("ignored", notice, reason="other_node")
        if notice.kind == "cancel":
            return self._cancel(notice.id, notice, now)
        if notice.id in self.withdrawn:
            return Outcome("ignored", notice, reason="withdrawn")
        same = self.find_same(notice)
        if same is not None:
            return Outcome("duplicate", notice, earlier=same)
        first = notice if notice.received_at else replace(notice, received_at=now)
        self.active[first.id] = first
        self.gen += 1
        return Outcome("new", first)

    def withdraw(self, notice_id: str, now: float) -> Outcome | None:
        """A provider withdrew a notice it had given (maintenance canceled, Azure event gone)."""
        held = self.active.get(notice_id)
        if held is None:
            return None
        return self._cancel(notice_id, held, now)

    def _cancel(self, notice_id: str, notice: Notice, now: float) -> Outcome:
        held = self.active.pop(notice_id, None)
        if held is None:
            return Outcome("ignored", notice, reason="cancel_unknown")
        self.withdrawn[notice_id] = now
        self.gen += 1
        return Outcome("withdrawn", held)

    def find_same(self, notice: Notice) -> Notice | None:
        """The active notice this one repeats: same id, or same kind, instance and deadline."""
        if notice.id in self.active:
            return self.active[notice.id]
        for held in self.active.values():
            if held.kind != notice.kind:
                continue
            if abs(held.deadline - notice.deadline) > SAME_DEADLINE_TOLERANCE_S:
                continue
            if held.instance_id and notice.instance_id and held.instance_id != notice.instance_id:
                continue
            return held
        return None

    def forget_old(self, now: float) -> None:
        for nid, when in list(self.withdrawn.items()):
            if now - when > WITHDRAWN_MEMORY_S:
                del self.withdrawn[nid]

    def snapshot(self) -> dict[str, Any]:
        """The announced (and persisted) state."""
        return {
            "node": self.node,
            "gen": self.gen,
            "active": [n.to_dict() for n in self.active.values()],
            "withdrawn": dict(self.withdrawn),
        }

    @classmethod
    def restore(cls, node: str, doc: dict[str, Any]) -> NoticeBook:
        """Rebuild from a snapshot; notices for another node (a reused disk) are dropped."""
        book = cls(node=node, gen=int(doc.get("gen", 0)))
        for d in doc.get("active", []):
            n = notice_from_dict(d)
            if n.node in (node, "*"):
                book.active[n.id] = n
        for nid, when in dict(doc.get("withdrawn", {})).items():
            book.withdrawn[str(nid)] = float(when)
        return book
