"""Suite-wide rules: under CI (CI=true) a skipped test is a failed test (see tests/support/ci.py);
the tests that wait out long stretches of real time run in a lane beside the rest (tests/support/lanes.py)."""
from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.support import lanes
from tests.support.ci import in_ci


def _fail_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where every tier must run: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    report = yield
    _fail_skip(report)  # type: ignore[arg-type]
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, object, object]:
    report = yield
    _fail_skip(report)  # type: ignore[arg-type]
    return report


@pytest.hookimpl(trylast=True)   # after -k / -m / --deselect have had their say
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lane = lanes.split(config, items)
    if lane is not None:
        config.stash[lanes.LANE_KEY] = lane


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if lanes.in_child():
        lanes.write_report(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    lane = session.config.stash.get(lanes.LANE_KEY, None)
    if lane is not None:
        lane.finish()
