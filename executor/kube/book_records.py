"""What the eviction book (``eviction_book``) takes from the drain besides listings and answers
(``Inputs``) and what it gives back (``Action``: a call to send; ``Emit``: an event that happened),
as records: the drain adapter (``runner``) and the book meet here, and nowhere in loose dicts."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.events import EventType


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the executor's loop knows that the book does not."""

    held: frozenset[str] = frozenset()   # uids of pods whose agent-socket clients have not acked
    hold_all: bool = False               # a client we cannot place on a pod holds every pod
    escalated: bool = False              # the verifier announced evict_over (or final)
    # pod uid -> until when its client's extend grant holds it (epoch; executor.extension): past
    # checkpoint_by and past the evict cutoff too, for that pod alone
    held_until: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Action:
    op: str                  # evict | delete
    uid: str
    key: str
    grace_s: int | None
    pod: dict[str, Any] = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Emit:
    event: EventType
    data: dict[str, Any]
