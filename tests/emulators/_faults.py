"""Fault rules shared by the emulators: which request misbehaves, and how.

A rule names a mode, the requests it matches (``path`` prefix, ``pattern``: a regex
searched in the request-target, query string included; ``method``), how many times it
fires (``count``; ``None`` = until cleared) and with what probability (0 parks it).
Matching is a pure function over the rule list and a random draw, so a seeded
table gives the same sequence of faults on every run.

Modes (executed by the HTTP shell in ``_handler``):

- ``status``: answer ``status`` without doing the work (500, 503, 429 ...); the body is
  ``body`` (a string, or a JSON object/array) or the app's own error shape.
- ``status_after``: do the work, then answer ``status`` anyway (a lost ack:
  the far end has the data, the client thinks it failed).
- ``delay``: wait ``seconds``, then answer normally.
- ``hang``: wait ``seconds``, then close the connection without an answer.
- ``close``: close the connection at once without an answer (FIN).
- ``reset``: reset the connection at once without an answer (RST).
- ``huge``: a 200 whose body is ``size`` bytes, streamed, never held in memory;
  ``chunked`` leaves out Content-Length so only the client's own cap stops it.
- ``garbage``: a 200 with a body that is not what the client expects.
- ``short``: a Content-Length the body never reaches, then a close.
"""
from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

MODES = ("status", "status_after", "delay", "hang", "close", "reset", "huge", "garbage", "short")

# Starts like JSON, then turns into binary: a parser must fail, not guess.
GARBAGE = b'{"action": "terminate", "ti\x00\xff\xfe\x89PNG\r\n\x1a\n<html>'

_MAX_SECONDS = 3600.0
_MAX_SIZE = 64 * 1024 * 1024 * 1024


@dataclass(slots=True)
class FaultRule:
    """One misbehaviour and the requests it applies to."""

    mode: str
    path: str = ""
    pattern: str | None = None
    method: str | None = None
    count: int | None = None
    probability: float = 1.0
    status: int = 500
    seconds: float = 0.0
    size: int = 100 * 1024 * 1024
    chunked: bool = False
    body: Any = None
    retry_after: str | int | None = None
    id: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_rule(spec: Mapping[str, Any]) -> FaultRule:
    """Build a rule from a control-API body; ``ValueError`` names the bad field."""
    unknown = set(spec) - (set(FaultRule.__dataclass_fields__) - {"id"})
    if unknown:
        raise ValueError(f"unknown fault fields: {sorted(unknown)}")
    try:
        rule = FaultRule(**spec)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    _check(rule.mode in MODES, f"mode must be one of {MODES}")
    _check(isinstance(rule.path, str), "path must be a string")
    _check(rule.pattern is None or isinstance(rule.pattern, str), "pattern must be a string")
    if rule.pattern is not None:
        try:
            re.compile(rule.pattern)
        except re.error as exc:
            raise ValueError(f"pattern is not a regular expression: {exc}") from None
    _check(rule.method is None or isinstance(rule.method, str), "method must be a string")
    _check(rule.count is None or (_is_int(rule.count) and rule.count > 0),
           "count must be a positive integer or null")
    _check(_is_number(rule.probability) and 0.0 <= rule.probability <= 1.0,
           "probability must be in [0, 1]")
    _check(_is_int(rule.status) and 100 <= rule.status <= 599, "status must be 100..599")
    _check(_is_number(rule.seconds) and 0 <= rule.seconds <= _MAX_SECONDS,
           f"seconds must be 0..{_MAX_SECONDS:.0f}")
    _check(_is_int(rule.size) and 0 < rule.size <= _MAX_SIZE, "size must be a positive integer")
    _check(isinstance(rule.chunked, bool), "chunked must be a boolean")
    _check(rule.body is None or isinstance(rule.body, (str, dict, list)),
           "body must be a string or a JSON object/array")
    _check(rule.retry_after is None or isinstance(rule.retry_after, str)
           or _is_int(rule.retry_after), "retry_after must be a string or an integer")
    if rule.method is not None:
        rule.method = rule.method.upper()
    return rule


def choose(rules: Sequence[FaultRule], method: str, path: str,
           draw: Callable[[], float], target: str = "") -> int | None:
    """Index of the first rule that fires for this request, or ``None``.

    A rule whose probability misses does not block the rules after it; the
    draw is taken only for a matching rule with probability below 1, so a
    seeded sequence does not depend on unrelated requests.
    """
    for index, rule in enumerate(rules):
        if not path.startswith(rule.path):
            continue
        if rule.method is not None and rule.method != method:
            continue
        if rule.pattern is not None and re.search(rule.pattern, target or path) is None:
            continue
        if rule.probability < 1.0 and draw() >= rule.probability:
            continue
        return index
    return None


class FaultTable:
    """The live rule list of one emulator; thread-safe."""

    def __init__(self, seed: int | None = None) -> None:
        self._rules: list[FaultRule] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._next_id = 1

    def add(self, rule: FaultRule) -> int:
        with self._lock:
            rule.id = self._next_id
            self._next_id += 1
            self._rules.append(rule)
            return rule.id

    def remove(self, rule_id: int) -> bool:
        with self._lock:
            before = len(self._rules)
            self._rules = [rule for rule in self._rules if rule.id != rule_id]
            return len(self._rules) != before

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def rules(self) -> list[dict[str, Any]]:
        with self._lock:
            return [rule.to_json() for rule in self._rules]

    def take(self, method: str, path: str, target: str = "") -> FaultRule | None:
        """The rule that fires for this request (its count spent), if any."""
        with self._lock:
            index = choose(self._rules, method, path, self._rng.random, target)
            if index is None:
                return None
            rule = self._rules[index]
            if rule.count is not None:
                rule.count -= 1
                if rule.count == 0:
                    del self._rules[index]
            return rule


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
