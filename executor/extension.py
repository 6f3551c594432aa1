"""More time to checkpoint (DESIGN section 6, ``extend``): the grant rule, pure.

A client that cannot checkpoint by ``checkpoint_by`` may ask for ``seconds`` more. The
agent grants what the budget allows and never more: the grant moves the client's own
``checkpoint_by`` (the notice's, or its last grant) ``seconds`` later, but never past
``deadline - evict_s - margin_s`` (``extend_limit``), so its pod still has the whole
eviction phase and the margin after the grant ends. Only that client's pod waits for it
(``Order.held_until``); every other pod moves as it would have.

Times are integer milliseconds (the wire's RFC 3339 precision), so a grant read back
from its text is the grant.
"""
from __future__ import annotations

from typing import Any

from common.timefmt import parse_rfc3339
from common.wire import Budget
from executor.socket_wire import MAX_EXTENDS

# Why an extend grants nothing (the ``extend_refused`` error's message starts with the label).
REFUSALS = {
    "unknown_notice": "no active notice of that id was sent to this client (unknown, withdrawn or ended)",
    "not_governing": "that notice no longer governs this client: extend the one it was told last",
    "answered": "this client already answered that notice: its pod is no longer held",
    "not_in_pod": "this client is in no pod the agent can hold (a host process, a Slurm job, "
                  "or a peer whose pod cannot be told)",
    "no_budget": "the drain of that notice has no extension budget",
    "at_limit": "checkpoint_by is already at the latest the budget allows (deadline - evict_s - margin_s)",
    "too_many": "too many extensions of one notice on this connection",
}


def extend_limit(deadline: float, budget: Budget) -> float:
    """The latest ``checkpoint_by`` any grant may give (epoch seconds): the pod still gets the
    contract's whole eviction phase and margin before the deadline."""
    return deadline - budget.evict_s - budget.margin_s


def limit_ms_of(notice: dict[str, Any]) -> int | None:
    """The ``extend_limit`` the executor passed with a notice, in ms; None when it has none
    (extends are then refused); ValueError when malformed."""
    text = notice.get("extend_limit")
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError("notice extend_limit must be an RFC 3339 string")  # noqa: TRY004 -- one error type for every bad notice
    return round(parse_rfc3339(text) * 1000)


def refusal(*, told: bool, governing: bool, answered: bool, holdable: bool, budget: bool, grants: int) -> str:
    """Why a connection may not extend a notice at all ("" if it may ask), in REFUSALS' order:
    ``told`` (an active notice it was sent), ``governing`` (the one it was sent last),
    ``answered`` (it acked it), ``holdable`` (its pod can be told), ``budget`` (a limit is
    known), ``grants`` (given so far on this notice)."""
    for reason, bad in (("unknown_notice", not told), ("not_governing", not governing), ("answered", answered),
                        ("not_in_pod", not holdable), ("no_budget", not budget), ("too_many", grants >= MAX_EXTENDS)):
        if bad:
            return reason
    return ""


def grant(current_ms: int, asked_s: int, limit_ms: int) -> int | None:
    """The new ``checkpoint_by`` (ms) for a client at ``current_ms`` asking ``asked_s`` more:
    at most ``limit_ms``; None when nothing at all can be granted."""
    if asked_s <= 0 or current_ms >= limit_ms:
        return None
    return min(current_ms + asked_s * 1000, limit_ms)
