"""A damaged state file never stops a process (issue 26, point 7: never a crash loop on one bad
record). Each process's state file is written by that process in good shape, then parts of it at
any depth are replaced by any JSON value, and the process starts on it and runs its turns: it must
neither raise (supervisord would restart it into the same file) nor lose what was good in it."""
from __future__ import annotations

import copy
import io
import json
import os
import time
from pathlib import Path
from typing import Any

import ujson
import zmq
from hypothesis import given
from hypothesis import strategies as st

from agentctl.status import AgentFiles, render_text, summarize
from common.config import build
from common.log import Logger
from common.notice import Notice
from tests.support.drain_records import record
from tests.support.fuzzing import fuzz, json_values
from tests.watcher.conftest import make_config

FIXTURE = json.loads((Path(__file__).parents[1] / "verifier" / "fixtures" / "verdicts-0bc60c5.json").read_text())
NOW = time.time()

# A change: a path of choices (the i-th key or item, modulo how many there are) and the value put there.
changes = st.lists(st.tuples(st.lists(st.integers(0, 50), min_size=1, max_size=4), json_values), min_size=1,
                   max_size=4)


def damaged(doc: Any, edits: list[tuple[list[int], Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for path, value in edits:
        at = doc
        for depth, choice in enumerate(path):
            keys = sorted(at) if isinstance(at, dict) else list(range(len(at))) if isinstance(at, list) else []
            if not keys:
                break
            key = keys[choice % len(keys)]
            if depth == len(path) - 1 or not isinstance(at[key], (dict, list)):
                at[key] = value
                break
            at = at[key]
    return doc


def dirs(tmp: Path) -> tuple[Path, Path]:
    run, state = tmp / "run", tmp / "state"
    run.mkdir(mode=0o700, exist_ok=True)
    state.mkdir(exist_ok=True)
    return run, state


def notice(nid: str) -> Notice:
    return Notice(nid, "reclaim", "node-a", "i-1", NOW - 5, NOW + 60, "sco", received_at=NOW - 4)


@fuzz(50)
@given(edits=changes)
def test_the_verifier_starts_and_judges_on_any_damage_to_its_verdicts(tmp_path_factory, edits):
    from verifier.__main__ import Verifier

    tmp = tmp_path_factory.mktemp("v")
    run, state = dirs(tmp)
    doc = damaged(FIXTURE, edits)
    (state / "verdicts.json").write_text(ujson.dumps(doc))
    config = build({"node": {"name": "node-a", "scheduler": "none"},
                    "paths": {"runtime_dir": str(run), "state_dir": str(state)}})
    ctx = zmq.Context()
    try:
        v = Verifier(config, Logger("verifier", stream=io.StringIO()), ctx)
        v.active = {nid: notice(nid) for nid in FIXTURE["verdicts"]}
        v.heard = {b"notice", b"contract", b"progress"}
        for t in (NOW, NOW + 100, NOW + 30 * 86400):
            v.turn(t)
        # What survived is still judged: no notice of the file is judged a second time.
        assert set(FIXTURE["verdicts"]) - set(v.state["verdicts"]) <= _dropped(doc)
        render_text(summarize(node="node-a", hall="h1", processes=[], files=AgentFiles(verifier=doc), now=NOW))
    finally:
        ctx.destroy(linger=0)


def _dropped(doc: Any) -> set[str]:
    """Verdicts the damage took away whole (not an object any more, or the table itself gone)."""
    table = doc.get("verdicts") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        return set(FIXTURE["verdicts"])
    return {nid for nid in FIXTURE["verdicts"] if not isinstance(table.get(nid), dict)}


GOOD_DRAINS = {"n1": record(notice("n1"), steps={"cordoned": NOW - 3, "evicted": NOW - 2},
                            remaining=["ns/a"]).to_dict(),
               "n2": record(notice("n2"), state="done", remaining=[], steps={"cordoned": NOW - 3}).to_dict()}


@fuzz(50)
@given(edits=changes)
def test_the_executor_starts_and_drains_on_any_damage_to_its_records(tmp_path_factory, edits):
    from executor.__main__ import Executor

    tmp = tmp_path_factory.mktemp("e")
    run, state = dirs(tmp)
    doc = damaged(GOOD_DRAINS, edits)
    (state / "executor.json").write_text(ujson.dumps(doc))
    config = build({"node": {"name": "node-a", "scheduler": "none"},
                    "paths": {"runtime_dir": str(run), "state_dir": str(state)},
                    "agent_socket": {"path": str(run / "agent.sock")}})
    ctx = zmq.Context()
    try:
        ex = Executor(config, Logger("executor", stream=io.StringIO()), ctx)
        ex.drains.contract_heard = True
        ex.drains.active = {"n1": notice("n1"), "n2": notice("n2")}
        for t in (NOW, NOW + 1, NOW + 100):
            ex.drains.turn(t)
        ex.publish()
        render_text(summarize(node="node-a", hall="h1", processes=[], files=AgentFiles(drains=doc), now=NOW))
        if ex.clients is not None:
            ex.clients.close()
        ex.spool.close()   # not close(): its flush waits a second for a spool that is not there
    finally:
        ctx.destroy(linger=0)


@fuzz(50)
@given(edits=changes)
def test_the_watcher_starts_on_any_damage_to_its_notice_state(tmp_path_factory, edits):
    from watcher.__main__ import Watcher

    tmp = tmp_path_factory.mktemp("w")
    run, state = dirs(tmp)
    config = make_config(node="node-a", paths={"runtime_dir": str(run), "state_dir": str(state)})
    ctx = zmq.Context()
    try:
        w = Watcher(config, Logger("watcher", stream=io.StringIO()), ctx)
        w.observe(notice("n1"), NOW)
        w.observe(notice("n2"), NOW)
        w.withdraw("n2", "relay", NOW + 1)
        with open(w.state_path, "rb") as f:
            good = ujson.loads(f.read())
        w.spool.close()
    finally:
        ctx.destroy(linger=0)
    doc = damaged(good, edits)
    with open(os.path.join(state, "notice.json"), "w") as f:
        f.write(ujson.dumps(doc))
    ctx = zmq.Context()
    try:
        w = Watcher(config, Logger("watcher", stream=io.StringIO()), ctx)
        w.retire_past(NOW + 100)
        w.announce()
        render_text(summarize(node="node-a", hall="h1", processes=[], files=AgentFiles(notices=doc), now=NOW))
    finally:
        ctx.destroy(linger=0)
