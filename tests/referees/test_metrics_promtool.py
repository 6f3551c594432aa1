"""The verifier's textfile passes Prometheus's own checker, `promtool check metrics`.

promtool parses the text exposition format as Prometheus does and lints the names against
Prometheus's conventions (counters end in _total, units in base units and spelled out, no type
in the name, HELP on every family): the same rules node_exporter's textfile collector and every
Prometheus that scrapes it apply.
"""
from __future__ import annotations

from tests.referees.tools import referee, run
from tests.support.promtext import parse


def promtool_check_metrics(text: str) -> tuple[int, str]:
    res = run([referee("promtool"), "check", "metrics"], stdin=text)
    return res.returncode, (res.stdout + res.stderr).strip()


def test_the_real_textfile_after_a_drain_an_overrun_and_rejections_passes_promtool(verifier_textfile):
    fams = parse(verifier_textfile)
    assert {"sco_agent_verdicts_total", "sco_agent_rejections_total",
            "sco_agent_notice_to_cordoned_seconds"} <= set(fams)
    rc, out = promtool_check_metrics(verifier_textfile)
    assert (rc, out) == (0, "")


def test_promtool_does_referee_names_and_syntax(verifier_textfile):
    """The check can fail: the same text with a counter missing _total, or a torn line, is refused."""
    renamed = verifier_textfile.replace("sco_agent_verdicts_total", "sco_agent_verdicts")
    rc, out = promtool_check_metrics(renamed)
    assert rc != 0 and 'counter metrics should have "_total" suffix' in out
    unit = verifier_textfile.replace("sco_agent_notice_to_empty_seconds", "sco_agent_notice_to_empty_milliseconds")
    rc, out = promtool_check_metrics(unit)
    assert rc != 0 and "milliseconds" in out
    rc, out = promtool_check_metrics(verifier_textfile + "sco_agent_notices_active{ 1\n")
    assert rc != 0 and "error while linting" in out
