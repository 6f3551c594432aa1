"""Fault injection rules and the request log, for tests that break the API server on purpose.

A rule matches a method and a regex searched in the request path (query string included) and
does one thing: ``error`` (answer ``status`` with a Status body), ``hang`` (hold the request
``seconds`` and then drop the connection unanswered), ``close`` (drop it at once) or
``latency`` (wait ``seconds``, then serve normally). ``count`` limits how many requests it hits;
``probability`` makes it random (from a seeded generator, so runs repeat).
"""
from __future__ import annotations

import random
import re
import threading
from dataclasses import dataclass
from typing import Any

ACTIONS = ("error", "hang", "close", "latency")


@dataclass
class FaultRule:
    id: int
    path: re.Pattern[str]
    method: str
    action: str
    status: int = 500
    seconds: float = 0.0
    remaining: int | None = None
    probability: float = 1.0
    body: dict[str, Any] | None = None
    retry_after: int | None = None
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return (self.method in ("*", method)) and self.remaining != 0 and bool(self.path.search(path))

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path.pattern, "method": self.method, "action": self.action,
                "status": self.status, "seconds": self.seconds, "remaining": self.remaining,
                "probability": self.probability, "retry_after": self.retry_after, "hits": self.hits}


def parse_rule(spec: Any, rule_id: int) -> FaultRule:
    """Build a rule from its JSON form; ValueError/TypeError names what is wrong."""
    if not isinstance(spec, dict):
        raise TypeError("a fault rule is a JSON object")
    unknown = set(spec) - {"path", "method", "action", "status", "seconds", "count", "probability",
                           "body", "retry_after"}
    if unknown:
        raise ValueError(f"unknown fault fields: {sorted(unknown)}")
    action = spec.get("action", "error")
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}")
    try:
        pattern = re.compile(str(spec.get("path", "")))
    except re.error as err:
        raise ValueError(f"bad path regex: {err}") from None
    count = spec.get("count")
    probability = float(spec.get("probability", 1.0))
    status = int(spec.get("status", 500))
    if count is not None and (not isinstance(count, int) or count < 1):
        raise ValueError("count must be a positive integer")
    if not 0.0 <= probability <= 1.0 or not 100 <= status <= 599:
        raise ValueError("probability must be in [0, 1] and status in [100, 599]")
    body = spec.get("body")
    if body is not None and not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    return FaultRule(id=rule_id, path=pattern, method=str(spec.get("method", "*")).upper(), action=action,
                     status=status, seconds=float(spec.get("seconds", 0.0)), remaining=count,
                     probability=probability, body=body,
                     retry_after=int(spec["retry_after"]) if spec.get("retry_after") is not None else None)


class Faults:
    """The active rules (first match wins) and the 'down' switch."""

    def __init__(self, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._next_id = 1
        self._rng = random.Random(seed)

    def add(self, spec: Any) -> int:
        with self._lock:
            rule = parse_rule(spec, self._next_id)
            self._next_id += 1
            self._rules.append(rule)
            return rule.id

    def remove(self, rule_id: int) -> bool:
        with self._lock:
            before = len(self._rules)
            self._rules = [r for r in self._rules if r.id != rule_id]
            return len(self._rules) != before

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.as_json() for r in self._rules]

    def pick(self, method: str, path: str) -> FaultRule | None:
        """The rule that fires for this request, consuming one of its hits; None = serve normally."""
        with self._lock:
            for rule in self._rules:
                if not rule.matches(method, path):
                    continue
                if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                    continue
                if rule.remaining is not None:
                    rule.remaining -= 1
                rule.hits += 1
                return rule
            return None


class RequestLog:
    """Every API request served (control requests excluded), oldest first, bounded."""

    def __init__(self, limit: int = 100000) -> None:
        self._lock = threading.Lock()
        self._entries: list[dict[str, Any]] = []
        self._seq = 0
        self._limit = limit

    def append(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._seq += 1
            entry["seq"] = self._seq
            self._entries.append(entry)
            if len(self._entries) > self._limit:
                del self._entries[: len(self._entries) - self._limit]

    def since(self, seq: int = 0) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self._entries if e["seq"] > seq]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    @property
    def last_seq(self) -> int:
        return self._seq
