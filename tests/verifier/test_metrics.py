"""The textfile parses strictly, counts what happened, and keeps label sets bounded."""
from __future__ import annotations

import pytest

from tests.support.promtext import ParseError, parse, value
from verifier import metrics


def test_empty_state_renders_every_family():
    fams = parse(metrics.render(metrics.empty()))
    assert set(fams) == set(metrics.METRICS)
    assert value(fams, "sco_agent_notice_to_empty_seconds_count") == 0
    assert value(fams, "sco_agent_notices_active") == 0


def test_histograms_count_observations_in_the_right_buckets():
    m = metrics.empty()
    for s in (0.03, 0.05, 0.7, 12.0, 400.0, -1.0):
        metrics.observe(m, "sco_agent_notice_to_cordoned_seconds", s)
    fams = parse(metrics.render(m))
    name = "sco_agent_notice_to_cordoned_seconds"
    assert value(fams, name + "_bucket", le="0.05") == 3          # 0.03, 0.05 and the clamped -1
    assert value(fams, name + "_bucket", le="1") == 4
    assert value(fams, name + "_bucket", le="15") == 5
    assert value(fams, name + "_bucket", le="300") == 5
    assert value(fams, name + "_bucket", le="+Inf") == 6
    assert value(fams, name + "_count") == 6
    assert value(fams, name + "_sum") == pytest.approx(0.03 + 0.05 + 0.7 + 12.0 + 400.0)


def test_counters_and_hostile_label_values():
    m = metrics.empty()
    metrics.inc(m, "sco_agent_notices_total", metrics.notice_labels("reclaim", "relay"))
    metrics.inc(m, "sco_agent_notices_total", metrics.notice_labels('x"\n\\', "relay"))
    metrics.inc(m, "sco_agent_rejections_total", ("notice", metrics.reason_label('bad"reason')), 3)
    fams = parse(metrics.render(m, {"sco_agent_notices_active": 2}))
    assert value(fams, "sco_agent_notices_total", kind="reclaim", channel="relay") == 1
    assert value(fams, "sco_agent_notices_total", kind="other", channel="relay") == 1
    assert value(fams, "sco_agent_rejections_total", what="notice", reason="other") == 3
    assert value(fams, "sco_agent_notices_active") == 2


def test_label_sets_are_capped():
    m = metrics.empty()
    for i in range(metrics.MAX_SERIES + 10):
        metrics.inc(m, "sco_agent_rejections_total", ("notice", f"r{i}"))
    series = m["counters"]["sco_agent_rejections_total"]
    assert len(series) == metrics.MAX_SERIES + 1 and series['what="other",reason="other"'] == 10


def test_escaping_survives_the_strict_parser():
    m = metrics.empty()
    metrics.inc(m, "sco_agent_escalations_total", ('a"b\\c\nd',))
    fams = parse(metrics.render(m))
    assert value(fams, "sco_agent_escalations_total", level='a"b\\c\nd') == 1


def test_the_parser_is_strict():
    """The referee itself must fail on what Prometheus would refuse (or we would regret)."""
    good = "# HELP a_total x\n# TYPE a_total counter\na_total 1\n"
    parse(good)
    for bad in (good.rstrip("\n"), good + "a_total 2\n", "# TYPE a counter\n# HELP a x\na 1\n",
                "b 1\n", good.replace(" 1\n", " one\n")):
        with pytest.raises(ParseError):
            parse(bad)


def test_wrong_kind_or_labels_is_a_programming_error():
    m = metrics.empty()
    with pytest.raises(ValueError):
        metrics.inc(m, "sco_agent_notice_to_empty_seconds")
    with pytest.raises(ValueError):
        metrics.observe(m, "sco_agent_notices_total", 1.0)
    with pytest.raises(ValueError):
        metrics.inc(m, "sco_agent_notices_total", ("reclaim",))
