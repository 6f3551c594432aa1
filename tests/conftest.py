"""Suite-wide rule: under CI (CI=true) a skipped test is a failed test (see tests/ci.py)."""
from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.ci import in_ci


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
