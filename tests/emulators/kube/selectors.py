"""Label and field selectors: parsing the query-string forms and matching objects.

Pure functions over plain dicts. Parse errors raise ``ValueError`` with the upstream wording;
the HTTP layer turns them into 400 Bad Request.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# One parsed requirement: (key, operator, values). Operators: =, !=, in, notin, exists, !exists, gt, lt.
Requirement = tuple[str, str, tuple[str, ...]]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_NOT_EXISTS = re.compile(rf"^!\s*({_KEY})$")
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\(([^()]*)\)$")
_BINARY = re.compile(rf"^({_KEY})\s*(==|=|!=|>|<)\s*({_VALUE})$")
_EXISTS = re.compile(rf"^({_KEY})$")


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside ``(...)``, as the upstream lexer does."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t.strip() for t in terms]


def parse_label_selector(text: str) -> list[Requirement]:
    """Parse ``a=b,c!=d,e in (x,y),!f,g``; empty text selects everything."""
    if not text.strip():
        return []
    reqs: list[Requirement] = []
    for term in _split_terms(text):
        if m := _NOT_EXISTS.match(term):
            reqs.append((m.group(1), "!exists", ()))
        elif m := _SET.match(term):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            if not values:
                raise ValueError(f"unable to parse requirement: {term!r}: found ')', expected: identifier")
            reqs.append((m.group(1), m.group(2), values))
        elif m := _BINARY.match(term):
            op = {"==": "=", ">": "gt", "<": "lt"}.get(m.group(2), m.group(2))
            if op in ("gt", "lt") and not re.fullmatch(r"-?\d+", m.group(3)):
                raise ValueError(f"unable to parse requirement: {term!r}: for 'Gt', 'Lt' operators, "
                                 "the value must be an integer")
            reqs.append((m.group(1), op, (m.group(3),)))
        elif m := _EXISTS.match(term):
            reqs.append((m.group(1), "exists", ()))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return reqs


def _matches_one(labels: dict[str, str], req: Requirement) -> bool:
    key, op, values = req
    present = key in labels
    value = labels.get(key)
    if op in {"=", "in"}:
        return present and value in values
    if op in {"!=", "notin"}:
        return not present or value not in values
    if op == "exists":
        return present
    if op == "!exists":
        return not present
    if not present or not re.fullmatch(r"-?\d+", value or ""):
        return False
    return int(value or 0) > int(values[0]) if op == "gt" else int(value or 0) < int(values[0])


def labels_match(labels: dict[str, str] | None, reqs: list[Requirement]) -> bool:
    labels = labels or {}
    return all(_matches_one(labels, r) for r in reqs)


def label_selector_requirements(selector: dict[str, Any] | None) -> list[Requirement]:
    """Requirements of a ``metav1.LabelSelector`` (matchLabels + matchExpressions)."""
    selector = selector or {}
    reqs: list[Requirement] = [(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(expr.get("operator", ""))
        if op is None:
            raise ValueError(f"{expr.get('operator')!r} is not a valid label selector operator")
        reqs.append((str(expr.get("key", "")), op, tuple(str(v) for v in expr.get("values") or ())))
    return reqs


def selector_is_empty(selector: dict[str, Any] | None) -> bool:
    selector = selector or {}
    return not selector.get("matchLabels") and not selector.get("matchExpressions")


# One parsed field requirement: (field, negated, value).
FieldRequirement = tuple[str, bool, str]


def parse_field_selector(text: str, supported: frozenset[str]) -> list[FieldRequirement]:
    """Parse ``spec.nodeName=n1,status.phase!=Failed``; unsupported fields are an error (400)."""
    if not text.strip():
        return []
    reqs: list[FieldRequirement] = []
    for term in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*", term)
        if not m:
            raise ValueError(f"invalid selector: '{text}'; can't understand '{term}'")
        if m.group(1) not in supported:
            raise ValueError(f"field label not supported: {m.group(1)}")
        reqs.append((m.group(1), m.group(2) == "!=", m.group(3)))
    return reqs


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string form of a field label: missing is "" (so ``spec.nodeName=`` finds unbound pods)."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(obj: dict[str, Any], reqs: list[FieldRequirement]) -> bool:
    return all((field_value(obj, f) == v) != neg for f, neg, v in reqs)


def make_filter(
    namespace: str | None, label_reqs: list[Requirement], field_reqs: list[FieldRequirement]
) -> Callable[[dict[str, Any]], bool]:
    """One predicate for list and watch: namespace scope, labels and fields."""

    def accept(obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if namespace is not None and meta.get("namespace") != namespace:
            return False
        return labels_match(meta.get("labels"), label_reqs) and fields_match(obj, field_reqs)

    return accept
