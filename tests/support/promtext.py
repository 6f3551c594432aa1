"""A strict parser of the Prometheus text exposition format (0.0.4), for the tests.

Stricter than Prometheus itself where it helps catch our mistakes: every
sample must belong to a family declared by HELP and TYPE before it, no series
may repeat, counters end in _total, and histogram buckets must be cumulative,
ordered, and end in +Inf equal to _count.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
_TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class ParseError(ValueError):
    pass


@dataclass
class Family:
    name: str
    type: str = ""
    help: str = ""
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def _labels(text: str | None, line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if not text:
        return out
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            raise ParseError(f"bad labels: {line!r}")
        if m.group(1) in out:
            raise ParseError(f"repeated label {m.group(1)}: {line!r}")
        out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        pos = m.end()
    return out


def _value(text: str, line: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    try:
        return float(text)
    except ValueError:
        raise ParseError(f"bad value: {line!r}") from None


def _family_of(name: str, families: dict[str, Family]) -> Family:
    if name in families and families[name].type != "histogram":
        return families[name]
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)] if name.endswith(suffix) else None
        if base and base in families and families[base].type == "histogram":
            return families[base]
    raise ParseError(f"sample {name} has no declared family")


def parse(text: str) -> dict[str, Family]:
    if not text.endswith("\n"):
        raise ParseError("exposition must end with a newline")
    families: dict[str, Family] = {}
    seen: set[tuple[str, tuple]] = set()
    for line in text.split("\n")[:-1]:
        if not line:
            continue
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            fam = families.setdefault(name, Family(name))
            if fam.help or fam.samples:
                raise ParseError(f"HELP for {name} repeated or after samples")
            fam.help = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            fam = families.setdefault(name, Family(name))
            if kind not in _TYPES or fam.type or fam.samples:
                raise ParseError(f"bad TYPE line: {line!r}")
            fam.type = kind
        elif line.startswith("#"):
            continue
        else:
            m = _SAMPLE.match(line)
            if not m:
                raise ParseError(f"bad sample line: {line!r}")
            name, labels = m.group(1), _labels(m.group(2), line)
            key = (name, tuple(sorted(labels.items())))
            if key in seen:
                raise ParseError(f"repeated series: {line!r}")
            seen.add(key)
            _family_of(name, families).samples.append((name, labels, _value(m.group(3), line)))
    for fam in families.values():
        if not fam.type or not fam.help:
            raise ParseError(f"{fam.name} lacks HELP or TYPE")
        if fam.type == "counter":
            if not fam.name.endswith("_total"):
                raise ParseError(f"counter {fam.name} does not end in _total")
            if any(v < 0 for _, _, v in fam.samples):
                raise ParseError(f"negative counter {fam.name}")
        if fam.type == "histogram":
            _check_histogram(fam)
    return families


def _check_histogram(fam: Family) -> None:
    buckets = [(s[1], s[2]) for s in fam.samples if s[0] == fam.name + "_bucket"]
    count = [s[2] for s in fam.samples if s[0] == fam.name + "_count"]
    total = [s[2] for s in fam.samples if s[0] == fam.name + "_sum"]
    if len(count) != 1 or len(total) != 1 or not buckets:
        raise ParseError(f"histogram {fam.name} lacks buckets, _sum or _count")
    bounds = [_value(labels["le"], fam.name) for labels, _ in buckets]
    if bounds != sorted(bounds) or bounds[-1] != math.inf or len(set(bounds)) != len(bounds):
        raise ParseError(f"histogram {fam.name}: le not ascending to +Inf")
    values = [v for _, v in buckets]
    if values != sorted(values) or values[-1] != count[0]:
        raise ParseError(f"histogram {fam.name}: buckets not cumulative or +Inf != _count")


def value(families: dict[str, Family], name: str, **labels: str) -> float:
    for fam in families.values():
        for sample_name, sample_labels, v in fam.samples:
            if sample_name == name and sample_labels == labels:
                return v
    raise KeyError(f"{name}{labels}")
