"""The executor's progress message (topic ``progress``): its drain records as the verifier and the
watcher read them, within what their sockets accept (pure: no I/O).

Every message must fit common.ipc.MAX_MESSAGE (256 KiB): libzmq drops the connection of a peer
that sends more, and the receiver goes deaf (common/ipc.py). The records themselves and
executor.json's codec are common/wire.py's; what can grow without end here (records of past drains,
the pods left on a node, the clients that acked) is cut to a bounded part, and the worst case is
computed in tests/common/test_message_bounds.py.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from common.verdict import POD_OUTCOMES
from common.wire import DrainRecord, decode_records, encoded_size

PROGRESS_BUDGET = 224 * 1024        # the progress message
PAST_SENT = 8                       # records of drains whose notice is no longer active, newest first
REMAINING_SENT = 100                # what is left on the node, listed per record (the count is exact)
ACKS_SENT = 32                      # checkpoint acks per record, earliest first
PODS_SENT = 120                     # pods' fates per record, as a verdict lists them first (the rest counted)


def encode_progress(records: Mapping[str, DrainRecord], active: Collection[str] = ()) -> dict[str, Any]:
    """The ``progress`` message: what the verifier and the watcher read of each drain, within
    PROGRESS_BUDGET.

    Not the memo (only the scheduler's adapter reads it, from executor.json). The record of every
    ``active`` notice is always carried -- whole, with at most REMAINING_SENT of what is left (and
    ``remaining_count``) and the ACKS_SENT earliest acks, or, when that no longer fits, slim: the
    first of what is left (never an empty list for a node that is not empty) and no acks. Then the
    PAST_SENT newest records of notices no longer active, while they fit. What is left out is
    counted in ``omitted``.
    """
    newest_first = sorted(records.items(), key=lambda kv: -kv[1].received_at)
    current = [(nid, rec) for nid, rec in newest_first if nid in active]
    # Every active notice's record slim first, so none is crowded out; then whole while they fit.
    out = {nid: _sent(rec, 1, 0, 0) for nid, rec in current}
    used = 64 + sum(encoded_size(nid) + encoded_size(d) + 2 for nid, d in out.items())  # + {"notices":,"omitted":}
    for nid, rec in current:
        whole = _sent(rec, REMAINING_SENT, ACKS_SENT, PODS_SENT)
        more = encoded_size(whole) - encoded_size(out[nid])
        if more and used + more <= PROGRESS_BUDGET:
            out[nid] = whole
            used += more
    omitted = past = 0
    for nid, rec in newest_first:
        if nid in out:
            continue
        d = _sent(rec, REMAINING_SENT, ACKS_SENT, PODS_SENT)
        cost = encoded_size(nid) + encoded_size(d) + 2
        if past >= PAST_SENT or used + cost > PROGRESS_BUDGET:
            omitted += 1
            continue
        out[nid] = d
        used += cost
        past += 1
    return {"notices": out, "omitted": omitted}


def _sent(rec: DrainRecord, remaining: int, acks: int, pods: int) -> dict[str, Any]:
    """``rec`` as the progress message carries it: no memo, ``remaining``, ``acks`` and ``pods``
    cut (the pods a verdict lists first are kept; ``pods_cut`` counts the others)."""
    d = rec.to_dict()
    for k in rec.memo:
        d.pop(k, None)
    if rec.remaining is not None and len(rec.remaining) > remaining:
        d["remaining"] = rec.remaining[:max(1, remaining)]
        d["remaining_count"] = len(rec.remaining)
    if len(rec.acks) > acks:
        first = sorted(rec.acks.items(), key=lambda kv: kv[1].at)[:acks]
        d["acks"] = {k: {"status": a.status, "at": a.at} for k, a in first}
    d["problem"] = rec.problem[:100]
    if len(rec.pods) > pods:
        kept = sorted(rec.pods.items(), key=lambda kv: (_RANK.get(kv[1].outcome, len(_RANK)), kv[1].at, kv[0]))[:pods]
        d["pods"] = {k: v for k, v in d["pods"].items() if k in dict(kept)}
        d["pods_cut"] = rec.pods_cut + len(rec.pods) - len(kept)
        if not d["pods"]:
            del d["pods"]
    return d


_RANK = {outcome: i for i, outcome in enumerate(POD_OUTCOMES)}


def decode_progress(body: Mapping[str, Any]) -> tuple[dict[str, DrainRecord], dict[str, str]]:
    """The ``progress`` message; BadRecord if it has no 'notices' object. (``remaining_count`` and
    ``omitted`` are for a reader of the message; a verdict lists at most REMAINING_SENT left anyway.)"""
    notices = body.get("notices")
    if isinstance(notices, dict):
        notices = {nid: ({k: v for k, v in d.items() if k != "remaining_count"} if isinstance(d, dict) else d)
                   for nid, d in notices.items()}
    return decode_records(notices)
