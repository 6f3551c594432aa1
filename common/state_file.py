"""A process's own state files: a bounded load, and an atomic save whose failure is logged.

Every process keeps a little JSON on disk (the watcher's notice.json, the
executor's executor.json, the verifier's verdicts.json, the contract status).
A state file is the process's own, so a bad one is no input to refuse: it is
logged once (``state.corrupt``) and the process starts as if there were none,
and its peers re-deliver what matters. A failed save is logged
(``state.write_failed``) and reported to the caller, which decides what else
to do (count it, keep a fallback copy, keep running): a full disk must not
stop a process.

Bounded both ways: ``load`` reads at most ``limit`` bytes, and ``save`` given
the same ``limit`` refuses (``state.too_large``) to write a file its own load
would refuse, so the last readable file is kept rather than replaced by one
no restart could read.

``Kept`` is the pair a drain's state lives in (docs/reliability.md, "Unit
restarts"): the file in ``paths.state_dir``, which a unit restart, a stop and
a reboot all leave alone, and a fallback copy in ``paths.runtime_dir`` for
while the state dir refuses writes (a full disk).
"""
from __future__ import annotations

import os
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


def save(path: str, doc: Any, log: Logger, *, mode: int = 0o600, report: bool = True,
         limit: int | None = None) -> bool:
    """Replace ``path`` with ``doc`` as JSON (common.fsutil.write_atomic); False, and a
    ``state.write_failed`` line unless ``report`` is False, when the disk refuses. With ``limit``,
    a document larger than that is not written (``state.too_large``, always logged)."""
    data = ujson.dumps(doc).encode()
    if limit is not None and len(data) > limit:
        log.error("state.too_large", path=path, size=len(data), limit=limit)
        return False
    try:
        write_atomic(path, data, mode=mode)
        return True
    except OSError as e:
        if report:
            log.error("state.write_failed", path=path, error=str(e)[:300])
        return False


class Kept:
    """One state file in the state dir, with a fallback copy for while the state dir refuses writes.

    The fallback is written only after the state dir refused a save and is removed after the next
    good one, so a fallback present at start is the newer copy -- unless its removal failed, hence
    the newer by modification time wins. The fallback lives in the runtime dir (another filesystem,
    tmpfs), so it outlives a restart of the process, not necessarily one of the unit: what was saved
    while the disk was full is lost only if the runtime dir is removed meanwhile too.
    """

    def __init__(self, path: str, fallback: str, limit: int, log: Logger) -> None:
        self.path, self.fallback, self.limit, self.log = path, fallback, limit, log
        self.failing = os.path.exists(fallback)   # removed at the next good save
        try:   # systemd's StateDirectory= makes it in production; elsewhere the first process does
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        except OSError:
            pass   # an unusable state dir: every save goes to the fallback, reported once

    def load(self) -> Any:
        """The newer readable copy's JSON, or None (a fresh start)."""
        copies = []
        for p in (self.path, self.fallback):
            doc = load(p, self.limit, self.log)
            if doc is not None:
                copies.append((_mtime(p), p == self.fallback, doc))
        return max(copies, key=lambda c: (c[0], c[1]))[2] if copies else None

    def save(self, doc: Any) -> bool:
        """True once ``doc`` is in the state dir; False if only the fallback (or nothing) has it.
        A failing spell is logged once, its end too."""
        if save(self.path, doc, self.log, report=not self.failing, limit=self.limit):
            if self.failing:
                self.failing = False
                self.log.info("state.write_recovered", path=self.path)
                try:
                    os.unlink(self.fallback)
                except FileNotFoundError:
                    pass
                except OSError as e:   # a stale copy loses to the newer file by its time
                    self.log.error("state.write_failed", path=self.fallback, error=str(e)[:300])
            return True
        self.failing = True
        save(self.fallback, doc, self.log, limit=self.limit)
        return False


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0
