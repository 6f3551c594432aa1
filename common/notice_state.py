"""The watcher's notice state (topic ``notice``): its record, its codec and its bounds (pure: no I/O).

Which notices are active for this node, which were withdrawn lately, and the watcher's own
figures, re-announced every second to the executor and the verifier. Every part is bounded so the
message fits what its receivers accept (common.ipc.MAX_MESSAGE; at its worst in
tests/common/test_message_bounds.py): the active notices by the watcher's notice book (count and
``ACTIVE_BUDGET``), the withdrawn ids and the counters here.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from common.notice import CHANNELS, Notice, notice_from_dict
from common.wire import BadRecord, _number, encoded_size

ACTIVE_BUDGET = 160 * 1024          # the active notices and their arrivals (the watcher refuses past it)
RECENT_WITHDRAWN = 128              # withdrawn ids carried in the notice state, newest first ...
RECENT_WITHDRAWN_BUDGET = 24 * 1024  # ... and at most this many bytes of them
COUNTERS_BUDGET = 16 * 1024         # the watcher's counters (bounded labels; past it, counted as dropped)
NOTICE_STATE_BUDGET = ACTIVE_BUDGET + RECENT_WITHDRAWN_BUDGET + COUNTERS_BUDGET + 1024   # + gen, keys

# An arrival per channel, as the notice state writes it: "metadata":1764762000.1234567,
_ARRIVALS_ROOM = sum(len(c) + 4 + 24 for c in CHANNELS) + 2


def notice_cost(n: Notice) -> int:
    """What one active notice takes in the notice state: its record and its arrivals on every channel."""
    return encoded_size(n.to_dict()) + 1 + encoded_size(n.id) + 1 + _ARRIVALS_ROOM + 1


def recent(ids_newest_first: Iterable[str], count: int = RECENT_WITHDRAWN,
           budget: int = RECENT_WITHDRAWN_BUDGET) -> frozenset[str]:
    """The newest ids, at most ``count`` of them and ``budget`` bytes encoded."""
    newest = list(islice(ids_newest_first, count))
    if encoded_size(newest) <= budget:   # the usual case, in one measure (this runs every announcement)
        return frozenset(newest)
    out: list[str] = []
    used = 2
    for i in newest:
        cost = encoded_size(i) + 1
        if len(out) >= count or used + cost > budget:
            break
        out.append(i)
        used += cost
    return frozenset(out)


# -- the watcher's notice state (topic ``notice``) ------------------------------------------

@dataclass(frozen=True, slots=True)
class NoticeState:
    """Which notices are active for this node, which were withdrawn lately, and the watcher's own figures.

    ``withdrawn`` is a bounded recent part (``recent``), not the watcher's whole memory: a notice
    leaves the active set only when it is withdrawn, so a receiver treats every notice it knows of
    (a drain record, a clock) that is not active as withdrawn too (``gone``) -- a receiver restarted
    after a flood of cancels has pushed an id out of the recent part still undoes that notice's drain.
    Only a notice first heard since ``book_since`` (when the watcher's notice book began: a watcher
    that lost notice.json starts a new one) -- the book has seen whatever became of it; one heard
    before is kept as it is, for the new book may learn it again from a channel.
    """

    active: dict[str, Notice]
    withdrawn: frozenset[str] = frozenset()
    arrivals: dict[str, dict[str, float]] = field(default_factory=dict)   # id -> channel -> epoch
    counters: dict[str, int] = field(default_factory=dict)                # the watcher's counters
    started_at: float = 0.0                                               # tells the watcher's starts apart
    gen: int = 0
    refused: tuple[ValueError, ...] = ()                                  # active records refused one by one
    book_since: float = 0.0                                               # when the watcher's book began

    def gone(self, known: Mapping[str, float]) -> frozenset[str]:
        """The withdrawn ids, and every id of ``known`` (id -> when the notice was first heard) that
        is not active and was first heard since the book began."""
        return self.withdrawn | frozenset(i for i, heard in known.items()
                                          if i not in self.active and heard >= self.book_since)

    def encode(self) -> dict[str, Any]:
        """The ``notice`` message. The active notices are the watcher's to bound (its notice book
        refuses a notice past MAX_ACTIVE or ACTIVE_BUDGET); the rest is bounded here."""
        withdrawn = sorted(recent(sorted(self.withdrawn)))   # a set: which ones, only its owner knows
        counters = dict(self.counters)
        if encoded_size(counters) > COUNTERS_BUDGET - 64:   # never with the watcher's own bounded labels
            counters = _within(self.counters, COUNTERS_BUDGET - 64)
        return {"gen": self.gen, "active": [n.to_dict() for n in self.active.values()],
                "withdrawn": withdrawn,
                "arrivals": {nid: self.arrivals[nid] for nid in self.active if nid in self.arrivals},
                "counters": counters, "started_at": self.started_at, "book_since": self.book_since}


def _within(counters: Mapping[str, int], budget: int) -> dict[str, int]:
    """The counters (by name) that fit ``budget`` bytes, and how many did not (``counters.dropped``)."""
    out: dict[str, int] = {}
    used = 2
    for k in sorted(counters):
        cost = encoded_size(k) + encoded_size(counters[k]) + 2
        if used + cost > budget:
            out["counters.dropped"] = len(counters) - len(out)
            break
        out[k] = counters[k]
        used += cost
    return out


def decode_notice_state(body: Mapping[str, Any], node: str) -> NoticeState:
    """The notices for ``node``; BadRecord if 'active' or 'withdrawn' is not a list."""
    raw, withdrawn = body.get("active") or [], body.get("withdrawn") or []
    if not isinstance(raw, list) or not isinstance(withdrawn, list):
        raise BadRecord("notice state: 'active' and 'withdrawn' must be lists")
    active: dict[str, Notice] = {}
    refused: list[ValueError] = []
    for d in raw:
        try:
            n = notice_from_dict(d)
        except ValueError as e:
            refused.append(e)
            continue
        if n.is_for(node):
            active[n.id] = n
    counters = body.get("counters")
    started_at = body.get("started_at")
    gen = body.get("gen")
    since = body.get("book_since")
    return NoticeState(
        active=active, withdrawn=frozenset(str(i) for i in withdrawn), arrivals=_arrivals(body.get("arrivals")),
        counters={k: v for k, v in counters.items() if isinstance(k, str) and isinstance(v, int)
                  and not isinstance(v, bool)} if isinstance(counters, dict) else {},
        started_at=float(started_at) if _number(started_at) else 0.0,
        gen=gen if isinstance(gen, int) and not isinstance(gen, bool) else 0, refused=tuple(refused),
        book_since=float(since) if _number(since) else 0.0)


def _arrivals(raw: object) -> dict[str, dict[str, float]]:
    """Per-channel arrival times, keeping only well-formed entries."""
    if not isinstance(raw, dict):
        return {}
    return {str(nid): {c: float(t) for c, t in channels.items() if c in CHANNELS and _number(t)}
            for nid, channels in raw.items() if isinstance(channels, dict)}
