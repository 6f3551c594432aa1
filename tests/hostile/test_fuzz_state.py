"""Corrupt state files: each process starts on whatever is on disk, and never crash-loops on it.

A state file is written atomically, so a torn write cannot happen; these are
for a disk that returns garbage, a hand edit, or a file from another version.
Each property starts from a real file (made by running the process's core)
and corrupts one to three values anywhere in it; the process must load it --
keeping what it can -- and then run its normal steps on the result, because a
process that loads a file and crashes one step later restarts into the same
file: a crash loop that ends in FATAL.
"""
from __future__ import annotations

import io
from functools import partial

import pytest
import ujson
import zmq
from hypothesis import given

from common import ipc
from common.config import build
from common.log import Logger
from common.notice import Notice
from common.progress import encode_progress
from executor import progress_file
from executor.__main__ import Executor
from tests.support import notices
from tests.support.drain_records import budget, record
from tests.support.fuzzing import fuzz, json_values, mutated
from verifier import core, metrics
from watcher.notice_book import NoticeBook

NODE = "node-a"
T0 = 1_800_000_000.0
BUDGET = budget(checkpoint_s=10, evict_s=10, margin_s=5)


notice = partial(notices.notice, now=T0, node=NODE, received_in=0.5)


def _verifier_state() -> dict:
    """A verdicts.json as the verifier writes it: clocks, escalations, a verdict, counters."""
    state = core.new_state()
    a, b = notice("n1"), notice("n2", deadline_in=30.0)
    progress = {"n1": record(a, budget=BUDGET, remaining=["ns/a"], steps={"cordoned": T0 + 1}),
                "n2": record(b, budget=BUDGET, state="done", remaining=[], steps={"cordoned": T0 + 1, "node_empty": T0 + 3},
                             acks={"c:1": ("checkpointed", T0 + 2)})}
    view = core.View(active={"n1": a, "n2": b}, progress=progress, progress_at=T0 + 20, budget=BUDGET,
                     arrivals={"n1": {"relay": T0 + 0.5}})
    for t in (1.0, 20.0, 40.0):
        core.advance(state, view, T0 + t)
    core.count_rejections(state, 1.0, {"rejected.bad_json": 3, "contract.rejected.bad_signature": 1})
    state["unacked"]["e1"] = {"event_id": "e1", "type": "drain.done", "seq": 1}
    return ujson.loads(ujson.dumps(core.to_json(state)))


VERIFIER_STATE = _verifier_state()


@fuzz(200)
@given(mutated(VERIFIER_STATE) | json_values)
def test_verifier_runs_on_any_state_file(doc):
    """normalize() keeps what is usable; judging, escalating, publishing, counting rejections and
    rendering the metrics then all work on it, and it saves as JSON again."""
    state = core.normalize(doc)
    active = {"n1": notice("n1"), "n3": notice("n3", deadline_in=60.0)}
    view = core.View(active=active, progress={"n3": record(active["n3"], budget=BUDGET, state="done", remaining=[])},
                     progress_at=T0 + 50, budget=BUDGET)
    for t in (45.0, 130.0):
        core.advance(state, view, T0 + t)
        core.escalations(state, active)
        core.count_rejections(state, 2.0, {"rejected.bad_json": 1, "ipc.rejected.topic": 2})
        metrics.render(state["metrics"], {"sco_agent_notices_active": len(active)})
    ujson.dumps(core.to_json(state))


def _book() -> dict:
    book = NoticeBook(node=NODE)
    book.observe(notice("n1"), T0)
    # The same reclaim from the metadata channel: an alias and a second arrival.
    book.observe(Notice(id="m-1", kind="reclaim", node=NODE, instance_id="i-1", issued_at=T0,
                        deadline=T0 + 120.5, source="aws", channel="metadata", received_at=T0 + 2), T0 + 2)
    book.observe(Notice(id="c", kind="cancel", node=NODE, instance_id="", issued_at=T0, deadline=T0,
                        source="sco"), T0 + 3)
    return ujson.loads(ujson.dumps(book.snapshot()))


WATCHER_STATE = _book()


@fuzz(200)
@given(mutated(WATCHER_STATE) | json_values)
def test_watcher_restores_any_notice_file_or_starts_empty(doc):
    """notice.json: restored, or one of the errors the watcher catches (it then starts empty); a
    restored book announces and persists again."""
    try:
        book = NoticeBook.restore(NODE, doc)
    except (ValueError, TypeError, AttributeError):
        return   # watcher/__main__.py _load_book: logged as state.corrupt, starts empty
    ujson.dumps(book.snapshot())
    book.observe(notice("n9"), T0 + 10)
    book.forget_old(T0 + 10)
    book.known_notices()


# -- the executor's progress file --------------------------------------------------------

def _progress() -> dict:
    rec = {"kind": "reclaim", "state": "running", "steps": {"cordoned": T0 + 1, "clients_told": T0 + 1.1},
           "received_at": T0 + 0.5, "policy": "drain", "taint_key": "sco.io/notice", "contract_serial": 3,
           "budget": {"budget_s": 25, "checkpoint_s": 10, "evict_s": 10, "margin_s": 5},
           "remaining": ["ns/a"], "pdb_blocked": "report", "exclude_from_lb": False,
           "evicted": {"uid-1": "ns/b"}, "deleted": {}, "reported": [], "acks": {}}
    return {"n1": rec, "n2": dict(rec, state="done")}


EXECUTOR_STATE = _progress()


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    base = tmp_path_factory.mktemp("state")
    config = build({"node": {"name": NODE, "hall": "h1", "scheduler": "none"},
                    "paths": {"runtime_dir": str(base / "run"), "state_dir": str(base / "state")},
                    "agent_socket": {"path": str(base / "run" / "agent.sock")},
                    "metadata": {"provider": "none"}, "relay": {"servers": []}})
    ipc.ensure_runtime_dir(config.paths.runtime_dir)
    ctx = zmq.Context()
    ex = Executor(config, Logger("executor", stream=io.StringIO()), ctx)
    yield ex
    ex.close()
    ctx.destroy(linger=0)


@fuzz(150)
@given(mutated(EXECUTOR_STATE) | json_values)
def test_executor_resumes_from_any_progress_file(executor, doc):
    """executor.json: records it cannot use are set aside; the drain of the notice still active
    (n1) then runs -- telling clients, publishing progress -- on what was kept."""
    with open(executor.state_path, "w") as f:
        f.write(ujson.dumps(doc))
    drains = executor.drains
    drains.records = progress_file.load(executor.state_path, drains.contract, executor.log)
    drains.contract_heard = True
    drains.active = {"n1": notice("n1")}
    drains.withdrawn = frozenset({"n2"})
    drains.turn(T0 + 5, 5.0)
    executor.publish()
    ujson.dumps(encode_progress(drains.records))
