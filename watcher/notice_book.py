"""The watcher's pure core: which notices are active, whatever channel brought them.

``NoticeBook.observe`` decides what one incoming notice means -- new, a
duplicate of one we hold (same id, or the same reclaim seen on another
channel), a withdrawal, or not ours -- and the book is the level-triggered
state the watcher persists and re-announces. No I/O, clock passed in.

One reclaim, one notice: the first arrival fixes the notice (its id, its
receive time); a later arrival of the same reclaim on another channel only
records when that channel heard it (``arrivals``, for the timeline) and the
other channel's id as an *alias*, so a withdrawal or an acknowledgement named
by either channel finds the one notice.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from common import notice_state
from common.notice import Notice, notice_from_dict

# Two channels report the same reclaim with deadlines that differ by rounding
# (IMDS gives whole seconds; a relay may carry milliseconds).
SAME_DEADLINE_TOLERANCE_S = 2.0
# How long a withdrawn id is remembered, so a late duplicate does not revive it.
WITHDRAWN_MEMORY_S = 24 * 3600.0
# Bounds on what a flood of (valid) notices can make us hold. A node sees a
# handful of notices in its life; these are far above that and far below harm.
# Active notices are announced every second, so they are bounded by count and by
# what they take in the notice message (common.notice_state.ACTIVE_BUDGET): past either, a
# new notice is refused (counted, ``too_many_active`` / ``active_too_large``).
# Withdrawn ids are remembered (and persisted) here; the message carries only the
# newest of them (``recent_withdrawn``).
MAX_ACTIVE = 64
MAX_WITHDRAWN = 4096


@dataclass(frozen=True, slots=True)
class Outcome:
    """What observing one notice did. ``action``: new | duplicate | withdrawn | ignored."""

    action: str
    notice: Notice
    reason: str = ""
    earlier: Notice | None = None   # for a duplicate: the notice we already hold
    first_on_channel: bool = False  # for a duplicate: this channel had not brought it before


@dataclass(slots=True)
class NoticeBook:
    """Active notices by id, their aliases and per-channel arrivals, recently withdrawn ids.

    ``dirty`` is set by every change worth persisting; ``gen`` only by changes
    to the set of active notices (what the executor acts on).
    """

    node: str
    active: dict[str, Notice] = field(default_factory=dict)
    withdrawn: dict[str, float] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)            # other id -> active id
    arrivals: dict[str, dict[str, float]] = field(default_factory=dict)  # active id -> channel -> t
    gen: int = 0
    dirty: bool = False
    active_bytes: int = 0                                            # the active notices' notice_state.notice_cost
    # When this book began (0: before anyone wrote it down). Receivers take a notice first heard
    # since then and no longer active for withdrawn (common.notice_state.NoticeState.gone).
    created_at: float = 0.0

    def observe(self, notice: Notice, now: float) -> Outcome:
        if not notice.is_for(self.node):
            return Outcome("ignored", notice, reason="other_node")
        if notice.kind == "cancel":
            return self._cancel(notice, now)
        if notice.id in self.withdrawn:
            return Outcome("ignored", notice, reason="withdrawn")
        received = notice.received_at or now
        same = self.find_same(notice)
        if same is not None:
            return self._repeat(same, notice, received)
        if len(self.active) >= MAX_ACTIVE:
            return Outcome("ignored", notice, reason="too_many_active")
        first = replace(notice, received_at=received)
        cost = notice_state.notice_cost(first)
        if self.active_bytes + cost > notice_state.ACTIVE_BUDGET:
            return Outcome("ignored", notice, reason="active_too_large")
        self.active_bytes += cost
        self.active[first.id] = first
        self.arrivals[first.id] = {first.channel: received}
        self.gen += 1
        self.dirty = True
        return Outcome("new", first)

    def _repeat(self, held: Notice, notice: Notice, received: float) -> Outcome:
        seen = self.arrivals.setdefault(held.id, {})
        first_here = notice.channel not in seen
        if first_here:
            seen[notice.channel] = received
            self.dirty = True
        if notice.id != held.id and self.aliases.get(notice.id) != held.id:
            self.aliases[notice.id] = held.id
            self.dirty = True
        return Outcome("duplicate", notice, earlier=held, first_on_channel=first_here)

    def withdraw(self, notice_id: str, now: float) -> Outcome | None:
        """A provider withdrew a notice it had given (maintenance canceled, Azure event gone)."""
        held_id = self.resolve(notice_id)
        if held_id not in self.active:
            return None
        return self._withdraw(held_id, now)

    def _cancel(self, notice: Notice, now: float) -> Outcome:
        held_id = self.resolve(notice.id)
        if held_id in self.active:
            return self._withdraw(held_id, now)
        if notice.id in self.withdrawn:
            return Outcome("ignored", notice, reason="withdrawn")   # a repeated cancel
        # A cancel that overtook its notice (another channel, a slow poll):
        # remember it, so the notice arriving later is not taken for live.
        self._remember_withdrawn(notice.id, now)
        self.dirty = True
        return Outcome("ignored", notice, reason="cancel_unknown")

    def _withdraw(self, held_id: str, now: float) -> Outcome:
        held = self.active.pop(held_id)
        self.active_bytes -= notice_state.notice_cost(held)
        self.arrivals.pop(held_id, None)
        self._remember_withdrawn(held_id, now)
        for alias in [a for a, target in self.aliases.items() if target == held_id]:
            del self.aliases[alias]
            self._remember_withdrawn(alias, now)
        self.gen += 1
        self.dirty = True
        return Outcome("withdrawn", held)

    def _remember_withdrawn(self, notice_id: str, now: float) -> None:
        self.withdrawn[notice_id] = now
        while len(self.withdrawn) > MAX_WITHDRAWN:
            del self.withdrawn[next(iter(self.withdrawn))]   # oldest first (insertion order)

    def recent_withdrawn(self) -> frozenset[str]:
        """The newest withdrawn ids, as many as the notice message carries (common.notice_state.recent)."""
        return notice_state.recent(reversed(self.withdrawn))

    def resolve(self, notice_id: str) -> str:
        """The active id ``notice_id`` names: itself, or the notice it is an alias of."""
        return self.aliases.get(notice_id, notice_id)

    def ids_of(self, held_id: str) -> list[str]:
        """Every id one active notice is known by (its own first), for acknowledgements."""
        return [held_id] + [a for a, target in self.aliases.items() if target == held_id]

    def find_same(self, notice: Notice) -> Notice | None:
        """The active notice this one repeats: same id (or alias), or -- from a channel
        that has not brought it yet -- same kind, instance and deadline.

        A channel never reports one reclaim under two ids (sources derive
        stable ids), so two ids from the *same* channel are two notices even
        when their deadlines coincide (two maintenance events, same window).
        """
        held_id = self.resolve(notice.id)
        if held_id in self.active:
            return self.active[held_id]
        for held in self.active.values():
            if held.kind != notice.kind or notice.channel in self.arrivals.get(held.id, {}):
                continue
            if abs(held.deadline - notice.deadline) > SAME_DEADLINE_TOLERANCE_S:
                continue
            if held.instance_id and notice.instance_id and held.instance_id != notice.instance_id:
                continue
            return held
        return None

    def known_notices(self) -> list[Notice]:
        """Every active notice under each id it is known by (sources resume from these)."""
        out = []
        for held in self.active.values():
            out += [held if i == held.id else replace(held, id=i) for i in self.ids_of(held.id)]
        return out

    def forget_old(self, now: float) -> None:
        for nid, when in list(self.withdrawn.items()):
            if now - when > WITHDRAWN_MEMORY_S:
                del self.withdrawn[nid]
                self.dirty = True

    def snapshot(self) -> dict[str, Any]:
        """The announced (and persisted) state; ``arrivals``: active id -> channel -> first arrival."""
        return {
            "node": self.node,
            "gen": self.gen,
            "created_at": self.created_at,
            "active": [n.to_dict() for n in self.active.values()],
            "withdrawn": dict(self.withdrawn),
            "aliases": dict(self.aliases),
            "arrivals": {nid: dict(self.arrivals.get(nid, {})) for nid in self.active},
        }

    @classmethod
    def restore(cls, node: str, doc: dict[str, Any]) -> NoticeBook:
        """Rebuild from a snapshot; notices for another node (a reused disk) are dropped.

        Raises ValueError/TypeError on a malformed snapshot (the caller starts empty).
        """
        book = cls(node=node, gen=int(doc.get("gen", 0)), created_at=float(doc.get("created_at", 0.0)))
        arrivals = dict(doc.get("arrivals") or {})
        for d in doc.get("active", []):
            n = notice_from_dict(d)
            if n.is_for(node):
                book.active[n.id] = n
                book.active_bytes += notice_state.notice_cost(n)
                raw = arrivals.get(n.id) or {n.channel: n.received_at}
                book.arrivals[n.id] = {str(c): float(t) for c, t in dict(raw).items()}
        for nid, when in dict(doc.get("withdrawn", {})).items():
            book.withdrawn[str(nid)] = float(when)
        for alias, target in dict(doc.get("aliases", {})).items():
            if str(target) in book.active:
                book.aliases[str(alias)] = str(target)
        return book
