"""One JSON object per line on stderr: the only logging any agent process does.

The standard ``logging`` package is deliberately not used: the agent's budget
is 40 MiB for five interpreters, and everything a process logs is a flat
record of a few fields. supervisord captures stderr into the program's log.
"""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO

import ujson

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class Logger:
    """``log.info("notice.received", notice_id=...)`` writes one line of JSON."""

    def __init__(self, process: str, level: str = "info", stream: TextIO | None = None) -> None:
        self.process = process
        self.threshold = LEVELS[level]
        self.stream = stream or sys.stderr

    def _write(self, level: str, msg: str, fields: dict[str, Any]) -> None:
        if LEVELS[level] < self.threshold:
            return
        record = {"ts": round(time.time(), 3), "level": level, "proc": self.process, "msg": msg}
        record.update(fields)
        try:
            line = ujson.dumps(record, ensure_ascii=False, escape_forward_slashes=False, reject_bytes=False)
        except (TypeError, OverflowError, ValueError):
            line = ujson.dumps({**{k: v for k, v in record.items() if k in ("ts", "level", "proc", "msg")},
                                "fields_repr": repr(fields)[:2000]})
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            # A closed or full stderr must never take the agent down.
            pass

    def debug(self, msg: str, **fields: Any) -> None:
        self._write("debug", msg, fields)

    def info(self, msg: str, **fields: Any) -> None:
        self._write("info", msg, fields)

    def warning(self, msg: str, **fields: Any) -> None:
        self._write("warning", msg, fields)

    def error(self, msg: str, **fields: Any) -> None:
        self._write("error", msg, fields)
