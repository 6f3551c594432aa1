"""A process's own state files: a bounded load, and an atomic save whose failure is logged.

Every process keeps a little JSON on disk (the watcher's notice.json, the
executor's executor.json, the verifier's verdicts.json, the contract status).
A state file is the process's own, so a bad one is no input to refuse: it is
logged once (``state.corrupt``) and the process starts as if there were none,
and its peers re-deliver what matters. A failed save is logged
(``state.write_failed``) and reported to the caller, which decides what else
to do (count it, keep a fallback copy, keep running): a full disk must not
stop a process.
"""
from __future__ import annotations

from typing import Any

import ujson

from common.fsutil import read_bounded, write_atomic
from common.log import Logger


def load(path: str, limit: int, log: Logger) -> Any:
    """The parsed JSON at ``path``; None when there is no file, or (logged) when it is unreadable,
    larger than ``limit`` bytes or not JSON."""
    try:
        return ujson.loads(read_bounded(path, limit))
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as e:
        log.error("state.corrupt", path=path, error=str(e)[:300])
        return None


def save(path: str, doc: Any, log: Logger, *, mode: int = 0o600, report: bool = True) -> bool:
    """Replace ``path`` with ``doc`` as JSON (common.fsutil.write_atomic); False, and a
    ``state.write_failed`` line unless ``report`` is False, when the disk refuses."""
    try:
        write_atomic(path, ujson.dumps(doc).encode(), mode=mode)
        return True
    except OSError as e:
        if report:
            log.error("state.write_failed", path=path, error=str(e)[:300])
        return False
