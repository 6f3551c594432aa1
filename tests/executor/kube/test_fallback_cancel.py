"""Issue 26, point 4: the fallback (the power-off command) runs only for a notice still active, and only
once its marker is durably saved. A cancel (the runner stopped) arriving at each moment of the wait for
the save, and a save the disk refused, each mean no command. Against the API-server emulator, down."""
from __future__ import annotations

import time
from typing import Any

import pytest

from executor.kube.api import KubeApi
from executor.scheduler import Remaining, Remember, Report
from tests.executor.kube.harness import NODE, Drain, make_spec
from tests.support.wait import wait_for


@pytest.fixture
def kube(emulator):
    emulator.reset()
    emulator.add_node(NODE)
    emulator.add_pod("app", NODE)
    emulator.down()
    yield emulator
    emulator.up()


class HeldSave(Drain):
    """A drain whose Remember-and-wait the test answers itself, when it chooses (the loop's save)."""

    def _report(self, r: Report) -> None:
        self.reports.append(r)

    def marker(self) -> Any:
        return next((r.saved for r in list(self.reports) if isinstance(r, Remember) and r.saved is not None), None)


def start(kube: Any, drains: list[Drain], tmp_path: Any) -> tuple[HeldSave, Any]:
    ran = tmp_path / "fallback-ran"
    spec = make_spec(fallback_command=("touch", str(ran)), fallback_allowed=True, fallback_at=time.time())
    d = HeldSave(lambda: KubeApi(kube.url, NODE, timeout_s=0.5), spec)
    drains.append(d)
    return d, ran


def test_a_cancel_while_the_marker_is_being_saved_runs_nothing(kube, drains, tmp_path):
    """Cancelled after the fallback began writing its marker, before the save was answered: the save
    then succeeds, and still nothing runs (it used to look for a cancel only before the wait)."""
    d, ran = start(kube, drains, tmp_path)
    saved = wait_for(d.marker, 15, "the fallback's marker handed over")
    d.runner.stop()          # the notice withdrawn: the executor stops its drain
    saved.set(True)          # then the record reaches the disk
    d.runner.join(10)
    assert not d.runner.alive
    assert not ran.exists() and d.events("drain.fallback_started") == [] and d.events("drain.fallback") == []


def test_a_cancel_before_the_save_is_answered_at_all_runs_nothing(kube, drains, tmp_path):
    """Cancelled while the save is still unanswered (a slow disk): the drain leaves without waiting it out."""
    d, ran = start(kube, drains, tmp_path)
    wait_for(d.marker, 15, "the fallback's marker handed over")
    d.runner.stop()
    d.runner.join(10)
    assert not d.runner.alive and not ran.exists() and d.events("drain.fallback") == []


def test_a_marker_the_disk_refused_means_no_power_off_and_says_so(kube, drains, tmp_path):
    d, ran = start(kube, drains, tmp_path)
    saved = wait_for(d.marker, 15, "the fallback's marker handed over")
    saved.set(False)
    (ev,) = [d.wait_event("drain.fallback")]
    assert ev["ran"] is False and "could not be saved" in ev["reason"] and not ran.exists()
    wait_for(lambda: any(isinstance(r, Remaining) and "fallback:not-run-unsaved" in r.items for r in d.reports),
             5, "what is left naming the fallback not run")
    time.sleep(1.5)    # probing on: it is not tried again
    assert len(d.events("drain.fallback")) == 1 and d.events("drain.fallback_started") == []


def test_a_marker_saved_and_no_cancel_runs_the_command(kube, drains, tmp_path):
    """The control: the same drain, nothing cancelled, the save answered ok: the command runs once."""
    d, ran = start(kube, drains, tmp_path)
    wait_for(d.marker, 15, "the fallback's marker handed over").set(True)
    ev = d.wait_event("drain.fallback")
    assert ev["ran"] is True and ran.exists()
