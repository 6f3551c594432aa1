"""A second lane for the few tests that wait on real time the issues ask for, beside the others.

Some tests are long because their issue asks for a long stretch of real time, not for work: two
minutes of Kafka outage (issue 18), an API server stopped for 40 s, a whole notice window (issue
16), pods that take up to 46 s to go while the unit restarts 20 times (issue 17). Their processes sit idle most of that time, and the suite waited with them. ``BACKGROUND``
names them; when a run selects them together with other tests, one child ``python -m pytest``
runs just those, from the start of the session, while this process runs the rest. Each of them
stays in this session as a stand-in item, at the end, that reports the child's outcome for it:
pass, fail (with the child's report), or skip (a failure under CI, as everywhere).

Why this is safe beside the other tests: what runs in the lane uses only its own temp dirs,
free ports and its own PIDs (no Slurm rig, no munge, nothing a name-wide kill would hit; the unit
restarts' tmpfs is mounted on its own temp dir), and every test of the suite must already pass with a CPU-heavy job beside it (issue 14);
the lane is lighter than that. Why not pytest-xdist: it would spread every test over workers,
the Slurm rigs and tmpfs fixtures included, which share machine-wide daemons; here only named,
isolated tests move, and no dependency is added.

``SCO_TEST_LANES=0`` runs everything in this process, as before.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

BACKGROUND = (
    "tests/spool/test_kafka_outage.py::test_kafka_down_two_minutes_with_400_then_with_500_every_event_arrives",
    "tests/e2e/test_do_no_harm.py::",
    "tests/chaos/test_unit_restarts.py::",        # pods that take 6-46 s to go, 20 restarts meanwhile
    "tests/e2e/test_kube_drain.py::",             # an outage waited out to the fallback's moment
    "tests/e2e/test_concurrent_notices.py::",     # deadlines seconds apart
    "tests/e2e/test_key_rotation_e2e.py::",       # contract refreshes
    "tests/verifier/test_verifies_real.py::",     # cutoffs of real windows
)
LANE_ENV = "SCO_TEST_LANE_REPORT"   # set in the child: where it writes its reports
LANE_TIMEOUT_S = 30 * 60
REPO = Path(__file__).resolve().parents[2]


class Lane:
    """The child pytest and where its reports go."""

    def __init__(self, nodeids: list[str]) -> None:
        # Short: a test's temp path ends in supervisord's control socket (plus its ".pid" while it
        # binds), and AF_UNIX names stop at 107 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="sco-lane-"))
        self.reports_path = self.dir / "reports.jsonl"
        self.log_path = self.dir / "pytest.log"
        env = dict(os.environ, **{LANE_ENV: str(self.reports_path)})
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                 str(self.dir / "t"), *nodeids], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        self._reports: dict[str, list[dict[str, Any]]] | None = None

    def reports(self, nodeid: str) -> tuple[list[dict[str, Any]], int]:
        """The child's reports for ``nodeid`` (setup, call, teardown), once it has finished; its exit code."""
        if self._reports is None:
            try:
                self.proc.wait(LANE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.stop()
            self._reports = {}
            if self.reports_path.exists():
                for line in self.reports_path.read_text().splitlines():
                    rep = json.loads(line)
                    self._reports.setdefault(rep["nodeid"], []).append(rep)
        return self._reports.get(nodeid, []), self.proc.returncode

    def stop(self) -> None:
        """SIGINT (pytest then tears its fixtures down, every rig stopped by PID), SIGKILL after 60 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def finish(self) -> None:
        """At the session's end: stopped if still running (an interrupted run); its files removed if
        it passed (its spool files are preallocated), kept for a look if not."""
        self.stop()
        if self.proc.returncode == 0:
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]


LANE_KEY = pytest.StashKey[Lane]()


class InLane(pytest.Item):
    """Stands in for a test the lane runs: its outcome is the child's."""

    lane: Lane

    def runtest(self) -> None:
        reports, rc = self.lane.reports(self.nodeid)
        failed = [r for r in reports if r["outcome"] == "failed"]
        if failed:
            text = "\n".join(f"[{r['when']}] {r['longrepr']}" for r in failed)
            pytest.fail(f"in the background lane ({self.lane.log_path}):\n{text}", pytrace=False)
        skipped = [r for r in reports if r["outcome"] == "skipped"]
        if skipped:
            pytest.skip(f"in the background lane: {skipped[0]['longrepr']}")
        if not any(r["when"] == "call" and r["outcome"] == "passed" for r in reports):
            pytest.fail(f"the background lane never ran it (exit {rc}):\n{self.lane.log_tail()}", pytrace=False)

    def reportinfo(self) -> tuple[str, int | None, str]:
        return self.path, None, f"{self.name} (background lane)"


def in_child() -> bool:
    return LANE_ENV in os.environ


def split(config: pytest.Config, items: list[pytest.Item]) -> Lane | None:
    """Move the BACKGROUND tests of this run into a lane, if there is anything else to run beside them."""
    if in_child() or os.environ.get("SCO_TEST_LANES", "1") == "0" or config.option.collectonly:
        return None
    moved = [item for item in items if item.nodeid.startswith(BACKGROUND)]
    if not moved or len(moved) == len(items):
        return None
    lane = Lane([item.nodeid for item in moved])
    stand_ins = []
    for item in moved:
        stand_in = InLane.from_parent(item.parent, name=item.name)
        stand_in.lane = lane
        stand_ins.append(stand_in)
    items[:] = [item for item in items if not item.nodeid.startswith(BACKGROUND)] + stand_ins
    return lane


def write_report(report: pytest.TestReport) -> None:
    """In the child: every phase's outcome, for the parent's stand-ins."""
    longrepr = "" if report.passed else str(report.longrepr)
    if report.skipped and isinstance(report.longrepr, tuple):
        longrepr = report.longrepr[2]
    line = json.dumps({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                       "longrepr": longrepr, "duration": report.duration})
    with open(os.environ[LANE_ENV], "a") as f:
        f.write(line + "\n")
