"""The executor's progress file (``executor.json``): every drain record, saved as it changes.

Loaded at start, so a restarted executor carries each drain on where it was
(steps done are not announced again, pods evicted are not evicted again). It
lives in the state dir (``common.state_file.Kept``): a unit restart removes the
runtime dir, and with it what a drain needs to resume. The file is the
records whole (``common.wire.encode_records``; the ``progress`` message carries less); each record is checked whole by
its codec (``common.wire.DrainRecord.from_dict``, the scheduler's memory by the
scheduler's ``memo_problem``). A record that fails is set aside (logged); its
drain is re-derived from the cluster, so only step timestamps are lost.

Bounded: ``prune`` keeps every record a drain still needs and only the newest
``MAX_PAST`` of the others, and a save larger than ``MAX_FILE`` (which load
would refuse) is not written.
"""
from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from common import state_file
from common.contract import Contract
from common.log import Logger
from common.wire import BadRecord, DrainRecord, DrainState, decode_records, encode_records

MAX_FILE = 4 << 20
# Records of drains that are over and whose notice is gone, kept for `sco-agentctl status` and the
# verifier's timelines: a node sees a handful of notices in its life, a flood of valid ones must not
# grow the file (and the executor) without end.
MAX_PAST = 64


def load(source: state_file.Kept | str, contract: Contract, log: Logger,
         memo_problem: Callable[[dict[str, Any]], str] | None = None) -> dict[str, DrainRecord]:
    """The records of the file (or the newer copy of a ``Kept`` pair) that can be resumed; {} when
    there is none or it is unreadable. Fields an older executor did not write take ``contract``'s
    choices."""
    doc = source.load() if isinstance(source, state_file.Kept) else state_file.load(source, MAX_FILE, log)
    if doc is None:
        return {}
    try:
        kept, refused = decode_records(doc, contract, memo_problem)
    except BadRecord:
        log.error("state.corrupt", path=getattr(source, "path", source), error="not a JSON object")
        return {}
    for nid, why in refused.items():
        log.error("state.record_dropped", notice_id=nid[:200], reason=why)
    return kept


def save(target: state_file.Kept | str, records: dict[str, DrainRecord], log: Logger | None = None) -> bool:
    doc = encode_records(records)
    if isinstance(target, state_file.Kept):
        return target.save(doc)
    if log is None:
        raise TypeError("progress_file.save: a plain path needs the log")
    return state_file.save(target, doc, log, limit=MAX_FILE)


def prune(records: dict[str, DrainRecord], active: Collection[str], withdrawn: Collection[str]) -> list[str]:
    """Drop (in place) all but the newest ``MAX_PAST`` records no drain needs any more; the ids dropped.

    Needed, so never dropped: the record of an active notice (without it the drain would start
    again), a running one, and that of a withdrawn notice not yet undone (its cordon still to lift).
    """
    def needed(nid: str, rec: DrainRecord) -> bool:
        return (nid in active or rec.state == DrainState.RUNNING
                or (nid in withdrawn and rec.state != DrainState.WITHDRAWN))
    past = sorted((rec.received_at, nid) for nid, rec in records.items() if not needed(nid, rec))
    dropped = [nid for _, nid in past[:max(0, len(past) - MAX_PAST)]]
    for nid in dropped:
        del records[nid]
    return dropped
