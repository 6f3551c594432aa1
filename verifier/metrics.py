"""Prometheus metrics as plain data, and their text exposition for node_exporter's textfile collector.

No port is opened: the verifier renders this module's state into a file that
node_exporter already reads. The state is a JSON-safe dict persisted with the
verdicts, so counters stay monotonic across restarts. Label values come from
small fixed sets, and each metric holds at most ``MAX_SERIES`` label sets
(beyond that, new ones are counted under "other"): a notice id or a hostile
string can never become a label.
"""
from __future__ import annotations

import math
import re
from typing import Any

from common.notice import CHANNELS, KINDS
from common.verdict import POD_OUTCOMES, PodLine

BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 90.0, 120.0, 180.0, 300.0)
MAX_SERIES = 64
_REASON = re.compile(r"^[a-z0-9_]{1,40}$")

# name -> (type, help, label names)
METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "sco_agent_notices_total": (
        "counter", "Notices this node received, by kind and the channel that brought them first.",
        ("kind", "channel")),
    "sco_agent_verdicts_total": (
        "counter", "Drain verdicts, by outcome and (for overruns) the step that held the drain up.",
        ("outcome", "held_up_by")),
    "sco_agent_rejections_total": (
        "counter", "Inputs refused by the watcher and the verifier, by what was refused and why.", ("what", "reason")),
    "sco_agent_escalations_total": (
        "counter", "Drain escalations announced by the verifier, by level.", ("level",)),
    "sco_agent_verdict_pods_total": (
        "counter", "Pods the drains touched, by what became of them and why they were held first, if they were.",
        ("outcome", "held")),
    "sco_agent_notices_active": (
        "gauge", "Notices active on this node now.", ()),
    "sco_agent_notice_to_cordoned_seconds": (
        "histogram", "Seconds from the provider issuing a notice to the node being cordoned.", ()),
    "sco_agent_notice_to_clients_told_seconds": (
        "histogram", "Seconds from the provider issuing a notice to its workloads being told.", ()),
    "sco_agent_notice_to_empty_seconds": (
        "histogram", "Seconds from the provider issuing a notice to the node being empty.", ()),
}

# Timeline key -> histogram it feeds.
TIMELINE_HISTOGRAMS = (
    ("cordoned", "sco_agent_notice_to_cordoned_seconds"),
    ("clients_told", "sco_agent_notice_to_clients_told_seconds"),
    ("node_empty", "sco_agent_notice_to_empty_seconds"),
)


def empty() -> dict[str, Any]:
    return {"counters": {}, "histograms": {}}


def clean(m: Any) -> dict[str, Any]:
    """Counters and histograms from a loaded state file, keeping only well-formed series.

    A corrupt entry is dropped, not crashed on: the verifier would restart into the same file.
    """
    out = empty()
    if not isinstance(m, dict):
        return out
    counters, histograms = m.get("counters"), m.get("histograms")
    for name, series in (counters.items() if isinstance(counters, dict) else ()):
        if METRICS.get(name, ("",))[0] == "counter" and isinstance(series, dict):
            out["counters"][name] = {k: v for k, v in series.items()
                                     if isinstance(k, str) and _count(v)}
    for name, h in (histograms.items() if isinstance(histograms, dict) else ()):
        if METRICS.get(name, ("",))[0] != "histogram" or not isinstance(h, dict):
            continue
        counts = h.get("counts")
        if (isinstance(counts, list) and len(counts) == len(BUCKETS) + 1 and all(_count(c) for c in counts)
                and _count(h.get("count")) and isinstance(h.get("sum"), (int, float))
                and not isinstance(h.get("sum"), bool) and math.isfinite(h["sum"])):
            out["histograms"][name] = {"counts": list(counts), "sum": float(h["sum"]), "count": h["count"]}
    return out


def _count(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def bounded(value: Any, allowed: tuple[str, ...]) -> str:
    value = str(value)
    return value if value in allowed else "other"


def notice_labels(kind: Any, channel: Any) -> tuple[str, str]:
    return bounded(kind, KINDS), bounded(channel, CHANNELS)


def reason_label(value: Any) -> str:
    value = str(value)
    return value if _REASON.match(value) else "other"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def label_key(name: str, values: tuple[str, ...]) -> str:
    names = METRICS[name][2]
    if len(names) != len(values):
        raise ValueError(f"{name} takes labels {names}, got {values}")
    return ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))


def inc(m: dict[str, Any], name: str, values: tuple[str, ...] = (), by: float = 1) -> None:
    if METRICS[name][0] != "counter":
        raise ValueError(f"{name} is not a counter")
    series = m["counters"].setdefault(name, {})
    key = label_key(name, values)
    if key not in series and len(series) >= MAX_SERIES:
        key = label_key(name, tuple("other" for _ in values))
    series[key] = series.get(key, 0) + by


def observe(m: dict[str, Any], name: str, seconds: float) -> None:
    if METRICS[name][0] != "histogram":
        raise ValueError(f"{name} is not a histogram")
    h = m["histograms"].setdefault(name, {"counts": [0] * (len(BUCKETS) + 1), "sum": 0.0, "count": 0})
    seconds = max(0.0, float(seconds))   # a provider clock ahead of ours must not give negative latency
    for i, bound in enumerate(BUCKETS):
        if seconds <= bound:
            h["counts"][i] += 1
            break
    else:
        h["counts"][-1] += 1
    h["sum"] += seconds
    h["count"] += 1


def observe_timeline(m: dict[str, Any], timeline_ms: dict[str, Any]) -> None:
    """Feed a finished notice's timeline into the latency histograms."""
    for key, name in TIMELINE_HISTOGRAMS:
        ms = timeline_ms.get(key)
        if isinstance(ms, int):
            observe(m, name, ms / 1000.0)


# Why a pod was held (common.pod_policy's reasons, "extended", "pdb_blocked"): a bounded label set.
HELD_REASONS = ("extended", "pdb_blocked", "wish:skip", "wish:wait-completed", "local_storage", "unreplicated")


def count_pods(m: dict[str, Any], pods: list[PodLine]) -> None:
    """A verdict's pods into ``sco_agent_verdict_pods_total`` (the Grafana panel of skipped and
    extended pods reads it)."""
    for p in pods:
        inc(m, "sco_agent_verdict_pods_total", (bounded(p.outcome, POD_OUTCOMES),
                                                bounded(p.held, HELD_REASONS) if p.held else "none"))


def rejection_deltas(seen: dict[str, Any], started_at: Any, counters: Any) -> list[tuple[str, str, int]]:
    """New rejections since the last report of a process's own counters; updates ``seen``.

    The watcher's counters restart at zero with the watcher, so they are
    tracked per ``started_at``: a new start's values count in full. Keys
    ``rejected.<reason>`` are notice rejections, ``<what>.rejected.<reason>``
    rejections of ``what`` (e.g. ``contract``).
    """
    if not isinstance(counters, dict):
        return []
    if seen.get("started_at") != started_at:
        seen["started_at"] = started_at
        seen["values"] = {}
    values = seen.get("values")
    if not isinstance(values, dict):
        values = seen["values"] = {}
    out = []
    for key, value in counters.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, int):
            continue
        what, sep, reason = key.partition("rejected.")
        if not sep:
            continue
        what = what.rstrip(".") or "notice"
        old = values.get(key, 0)
        old = old if isinstance(old, int) and not isinstance(old, bool) else 0
        delta = value - old
        if delta > 0:
            out.append((reason_label(what), reason_label(reason), delta))
        values[key] = max(value, old)
    return out


def _num(v: float) -> str:
    if isinstance(v, int) or float(v).is_integer():
        return str(int(v))
    return repr(float(v))


def render(m: dict[str, Any], gauges: dict[str, float] | None = None) -> str:
    """The text exposition format (version 0.0.4), every defined metric with HELP and TYPE."""
    lines = []
    gauges = gauges or {}
    for name, (kind, help_text, _labels) in METRICS.items():
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        if kind == "counter":
            for key, value in sorted(m["counters"].get(name, {}).items()):
                lines.append(f"{name}{{{key}}} {_num(value)}" if key else f"{name} {_num(value)}")
        elif kind == "gauge":
            lines.append(f"{name} {_num(gauges.get(name, 0))}")
        else:
            h = m["histograms"].get(name) or {"counts": [0] * (len(BUCKETS) + 1), "sum": 0.0, "count": 0}
            running = 0
            for bound, count in zip(BUCKETS, h["counts"], strict=False):
                running += count
                lines.append(f'{name}_bucket{{le="{_num(bound)}"}} {running}')
            lines.append(f'{name}_bucket{{le="+Inf"}} {h["count"]}')
            lines.append(f"{name}_sum {_num(round(h['sum'], 6))}")
            lines.append(f"{name}_count {h['count']}")
    return "\n".join(lines) + "\n"

