"""The executor's progress file (``executor.json``): every drain record, saved as it changes.

Loaded at start, so a restarted executor carries each drain on where it was
(steps done are not announced again, pods evicted are not evicted again). The
file is the ``notices`` object of the ``progress`` message; each record is
checked whole by its codec (``common.wire.DrainRecord.from_dict``, the
scheduler's memory by the scheduler's ``memo_problem``). A record that fails is
set aside (logged); its drain is re-derived from the cluster, so only step
timestamps are lost.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ujson

from common.contract import Contract
from common.fsutil import write_atomic
from common.log import Logger
from common.wire import BadRecord, DrainRecord, decode_records, encode_progress

MAX_FILE = 4 << 20


def load(path: str, contract: Contract, log: Logger,
         memo_problem: Callable[[dict[str, Any]], str] | None = None) -> dict[str, DrainRecord]:
    """The records of the file at ``path`` that can be resumed; {} when there is none or it is unreadable.
    Fields an older executor did not write take ``contract``'s choices."""
    try:
        with open(path, "rb") as f:
            doc = ujson.loads(f.read(MAX_FILE))
    except FileNotFoundError:
        return {}
    except (ValueError, OSError) as e:
        log.error("state.corrupt", path=path, error=str(e)[:300])
        return {}
    try:
        kept, refused = decode_records(doc, contract, memo_problem)
    except BadRecord:
        log.error("state.corrupt", path=path, error="not a JSON object")
        return {}
    for nid, why in refused.items():
        log.error("state.record_dropped", notice_id=nid[:200], reason=why)
    return kept


def save(path: str, records: dict[str, DrainRecord], log: Logger) -> None:
    try:
        write_atomic(path, ujson.dumps(encode_progress(records)["notices"]).encode())
    except OSError as e:
        log.error("state.write_failed", error=str(e))
