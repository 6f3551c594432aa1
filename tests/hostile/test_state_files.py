"""A damaged state file never stops a process, nor ``sco-agentctl status`` (issue 26, point 7:
never a crash loop on one bad record). The verifier's state file as the verifier of 0bc60c5 wrote
it, damaged anywhere, and the real Verifier started and turned on it (tests/hostile/test_fuzz_state.py
does the cores of all three processes): it must neither raise (supervisord would restart it into
the same file) nor judge again a notice whose verdict is still there."""
from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import ujson
import zmq
from hypothesis import given

from agentctl.status import AgentFiles, render_text, summarize
from common.config import build
from common.log import Logger
from common.notice import Notice
from tests.hostile.test_fuzz_state import EXECUTOR_STATE, NODE, T0, WATCHER_STATE
from tests.support.clocks import at
from tests.support.fuzzing import fuzz, json_values, mutated

FIXTURE = json.loads((Path(__file__).parents[1] / "verifier" / "fixtures" / "verdicts-0bc60c5.json").read_text())
NOW = time.time()


def dirs(tmp: Path) -> tuple[Path, Path]:
    run, state = tmp / "run", tmp / "state"
    run.mkdir(mode=0o700, exist_ok=True)
    state.mkdir(exist_ok=True)
    return run, state


def notice(nid: str) -> Notice:
    return Notice(nid, "reclaim", "node-a", "i-1", NOW - 5, NOW + 60, "sco", received_at=NOW - 4)


@fuzz(50)
@given(doc=mutated(FIXTURE))
def test_the_verifier_starts_and_judges_on_any_damage_to_its_verdicts(tmp_path_factory, doc):
    from verifier.__main__ import Verifier

    tmp = tmp_path_factory.mktemp("v")
    run, state = dirs(tmp)
    (state / "verdicts.json").write_text(ujson.dumps(doc))
    config = build({"node": {"name": "node-a", "scheduler": "none"},
                    "paths": {"runtime_dir": str(run), "state_dir": str(state)}})
    ctx = zmq.Context()
    try:
        v = Verifier(config, Logger("verifier", stream=io.StringIO()), ctx)
        v.active = {nid: notice(nid) for nid in FIXTURE["verdicts"]}
        v.heard = {b"notice", b"contract", b"progress"}
        for i, t in enumerate((NOW, NOW + 100, NOW + 30 * 86400)):
            v.turn(at(t, 1000.0 + i))
        # What survived is still judged: no notice of the file is judged a second time.
        assert set(FIXTURE["verdicts"]) - set(v.state["verdicts"]) <= _dropped(doc)
    finally:
        ctx.destroy(linger=0)


def _dropped(doc: Any) -> set[str]:
    """Verdicts the damage took away whole (not an object any more, or the table itself gone)."""
    table = doc.get("verdicts") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        return set(FIXTURE["verdicts"])
    return {nid for nid in FIXTURE["verdicts"] if not isinstance(table.get(nid), dict)}


@fuzz(150)
@given(verifier=mutated(FIXTURE) | json_values, notices=mutated(WATCHER_STATE) | json_values,
       drains=mutated(EXECUTOR_STATE) | json_values)
def test_sco_agentctl_status_shows_whatever_state_files_it_finds(verifier, notices, drains):
    """It crashed on a verdict whose left was not a list, and on a notice.json whose active was not one."""
    files = AgentFiles(notices=notices, drains=drains, verifier=verifier)
    render_text(summarize(node=NODE, hall="h1", processes=[], files=files, now=T0 + 30))
