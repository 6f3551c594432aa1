"""deploy/grafana/sco-agent.json: every query is valid PromQL (promtool) and names a metric the textfile has.

The textfile is the real verifier's (tests/referees/textfile.py), so a metric renamed in
verifier/metrics.py and not in the dashboard fails here. PromQL syntax is refereed by promtool:
each query, with Grafana's variables put in as Grafana would, becomes a recording rule, and
`promtool check rules` parses it with Prometheus's own parser.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.referees.tools import referee, run
from tests.support.agent_rig import REPO
from tests.support.promtext import Family, parse

DASHBOARD = os.path.join(REPO, "deploy", "grafana", "sco-agent.json")
HISTOGRAMS = ("sco_agent_notice_to_cordoned_seconds", "sco_agent_notice_to_clients_told_seconds",
              "sco_agent_notice_to_empty_seconds")
# What Grafana puts in for its variables (a multi-value $instance becomes a regex alternation).
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "7d", "$instance": "(node-a|node-b)"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
             "and", "or", "unless", "inf", "nan"}


def load() -> dict[str, Any]:
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", ())   # collapsed rows hold their panels


def queries(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable's label_values()."""
    out = [(f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in panels(dash) for t in p.get("targets", ())]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.+),\s*\w+\)", var["query"]["query"])
            assert m, f"variable {var['name']}: not a label_values() query"
            out.append((f"variable {var['name']}", m.group(1)))
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    keywords, label names (in {...}, by/without (...)) or durations ([...])."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                        # string literals
    s = re.sub(r"\{[^}]*\}", "", s)                                      # label matchers
    s = re.sub(r"\[[^\]]*\]", "", s)                                     # range and subquery windows
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", s)  # label lists
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or m.group().lower() in _KEYWORDS:
            continue                                                     # a function or a keyword
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] == "."):
            continue                                                     # the exponent or unit of a number
        names.add(m.group())
    return names


def exposed(fams: dict[str, Family]) -> set[str]:
    """Every series name a query can select: a histogram family is its _bucket, _sum and _count."""
    out = set()
    for name, fam in fams.items():
        if fam.type == "histogram":
            out |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            out.add(name)
    return out


def test_metric_name_extraction():
    assert metric_names('histogram_quantile(0.9, sum by (le) (rate(a_seconds_bucket{x=~"b|c"}[5m])))') == \
        {"a_seconds_bucket"}
    assert metric_names('sum without (instance) (x_total) / on (job) group_left (le) y offset 5m > 1e3') == \
        {"x_total", "y"}


def test_every_query_names_a_metric_the_real_textfile_has(verifier_textfile):
    fams = parse(verifier_textfile)
    have = exposed(fams)
    sampled = {name for fam in fams.values() for name, _labels, _v in fam.samples}
    assert have <= sampled, "the real textfile lacks samples of some families: the check would be weak"
    seen = set()
    for where, expr in queries(load()):
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        assert names <= have, f"{where}: {sorted(names - have)} not in the verifier's textfile"
        seen |= names
    # What issue 21 asks the dashboard to show.
    assert {f"{h}_bucket" for h in HISTOGRAMS} <= seen
    assert {"sco_agent_verdicts_total", "sco_agent_rejections_total"} <= seen


def test_the_asked_for_panels_are_there():
    exprs = {p["title"]: [t["expr"] for t in p["targets"]] for p in panels(load())}
    for h in HISTOGRAMS:
        quantiles = [e for es in exprs.values() for e in es
                     if e.startswith("histogram_quantile(") and f"{h}_bucket" in e]
        assert len(quantiles) == 3 and all("by (le)" in e for e in quantiles), h
    assert any(re.search(r"by \([^)]*\boutcome\b", e) for e in exprs["Verdicts by outcome"])
    assert any(re.search(r"by \([^)]*\breason\b", e) for e in exprs["Rejections by reason"])
    # Issue 28, point 8: the pods the drains left in place, and those whose workload asked for more time.
    pods = exprs["Skipped and extended pods"]
    assert any('sco_agent_verdict_pods_total{outcome="skipped"' in e for e in pods)
    assert any('sco_agent_verdict_pods_total{held="extended"' in e for e in pods)


def substituted(expr: str) -> str:
    for var, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(var, value)
    assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
    return expr


def promtool_check_rules(tmp_path, exprs: list[str]) -> tuple[int, str]:
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(json.dumps(rules, indent=1))   # JSON is YAML
    res = run([referee("promtool"), "check", "rules", str(path)])
    return res.returncode, res.stdout + res.stderr


def test_every_query_parses_as_promql(tmp_path):
    exprs = [substituted(e) for _where, e in queries(load())]
    rc, out = promtool_check_rules(tmp_path, exprs)
    assert rc == 0 and f"SUCCESS: {len(exprs)} rules found" in out, out


@pytest.mark.parametrize("broken", ["sum by (le (x_bucket)", "rate(x_total[5])", 'x{le=~"$instance"}'])
def test_promtool_refuses_broken_promql(tmp_path, broken):
    rc, out = promtool_check_rules(tmp_path, [broken.replace("$instance", "(")])
    assert rc != 0 and "FAILED" in out, out
