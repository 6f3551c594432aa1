"""Which notice governs the node's one drain, which notices it serves, and which still need the node marked.

A node may hold several active notices at once (a maintenance window, then a
reclaim; the same reclaim from the relay and from the metadata service). There is
one node and one drain: DESIGN.md section 9, "Many notices at once". This module
decides, as a pure function over plain data, what that drain is:

- **governing**: the notice whose order the scheduler runs -- its deadline sets the
  pace, the escalation and the fallback moment; its kind and id are what the taint
  and the annotation name. Among the notices whose drain is still running, the
  earliest deadline that wants the node drained; if none does, the earliest that
  wants it cordoned. Ties go to the smaller id, so every turn (and every restart)
  picks the same one.
- **served**: every running notice the drain works for; each gets the drain's steps,
  what is left and its end, and so its own verdict.
- **marking**: every active notice that wants the node's marks (cordon, taint,
  load-balancer label, and the node condition to come). A withdrawn notice undoes
  nothing while this is not empty; ``marker`` is the one the marks should name then.

What a notice wants is a value (``Want``) its caller derives from the record
(``executor.drain_start.want_of``), so the rules of when a drain starts are a change to that
derivation, not to this: a notice whose contract defers its drain to ``deadline -
budget_s`` (DESIGN section 9, "When the drain starts") wants ``CORDON`` until then and
``DRAIN`` from then; a cordon-only notice always ``CORDON``. A notice that wants only the
cordon governs only while no notice wants the node drained, and once its cordon is done it
is no longer running: it stays in ``marking`` (the node kept closed for it) and out of
``served`` (its record does not follow another notice's evictions). A reclaim that
arrives meanwhile therefore governs and drains at once; withdrawn, it leaves the node
cordoned for the other, its evictions stopped.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum


class Want(IntEnum):
    """What a notice wants of the node now; a larger value wants more."""

    NOTHING = 0
    CORDON = 1     # new work kept off: cordon, taint, label
    DRAIN = 2      # and the node emptied


@dataclass(frozen=True, slots=True)
class Candidate:
    """One active (not withdrawn) notice with a drain record."""

    notice_id: str
    deadline: float   # wall-clock epoch
    want: Want
    running: bool     # its drain has not reached an end state


@dataclass(frozen=True, slots=True)
class Service:
    governing: str | None = None          # whose order the scheduler runs; None: no drain to run
    served: tuple[str, ...] = ()          # running notices the drain works for, governing first
    marking: frozenset[str] = frozenset()  # active notices that want the node's marks
    marker: str | None = None             # the one the marks name (the governing, else the earliest)


def _urgency(c: Candidate) -> tuple[int, float, str]:
    return (-int(c.want), c.deadline, c.notice_id)


def serve(candidates: Iterable[Candidate]) -> Service:
    """The node's one drain for these notices (see the module docstring)."""
    wanting = sorted((c for c in candidates if c.want > Want.NOTHING), key=_urgency)
    if not wanting:
        return Service()
    served = tuple(c.notice_id for c in wanting if c.running)
    governing = served[0] if served else None
    marker = governing or min(wanting, key=lambda c: (c.deadline, c.notice_id)).notice_id
    return Service(governing, served, frozenset(c.notice_id for c in wanting), marker)
