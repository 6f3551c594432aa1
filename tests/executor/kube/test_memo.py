"""executor.kube.memo (issue 26, point 9, the Kubernetes half): the drain's memory is one typed record
with one codec; a record written by today's main still reads; the memory a drain hands back has the
shape it always had."""
from __future__ import annotations

import io
import os

import pytest

from common.config import build
from common.contract import BUILTIN
from common.log import Logger
from common.wire import Budget, phase_ends
from executor import progress_file
from executor.kube.memo import KubeMemo
from executor.kube.scheduler import drain_spec, memo_problem
from executor.scheduler import Order

# Written by main at 0bc60c5 (executor.progress_file.save of a running reclaim with evictions,
# a PDB-blocked pod reported and the fallback marked), before this module existed.
FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "executor-main-0bc60c5.json")


def test_a_record_written_by_main_reads_into_the_typed_memo():
    records = progress_file.load(FIXTURE, BUILTIN, Logger("executor", stream=io.StringIO()), memo_problem)
    rec = records["n-main-1"]
    memo = KubeMemo.from_dict(rec.memo)
    assert memo == KubeMemo(evicted={"uid-web": "default/web-0"}, reported=["uid-db"], reported_for="",
                            fallback_started=1796000100.0)
    assert memo.reported_by("n-main-1") == {"uid-db"}   # an older record's reports are its own notice's
    order = Order(notice_id="n-main-1", kind=rec.kind, deadline=rec.received_at + 120, received_at=rec.received_at,
                  budget=rec.budget, ends=rec.ends(rec.received_at + 120), cordon_only=False,
                  taint_key=rec.taint_key, pdb_blocked=rec.pdb_blocked, exclude_from_lb=False, memo=rec.memo)
    spec = drain_spec(order, build({"kubernetes": {"api_url": "http://127.0.0.1:1"}}))
    assert spec.memo == memo


def test_the_memory_keeps_its_shape_and_round_trips():
    memo = KubeMemo(evicted={"u1": "ns/a"}, deleted={"u2": "ns/b"}, reported=["u3"], reported_for="n1",
                    fallback_started=1796000000.5)
    d = memo.to_dict()
    assert d == {"evicted": {"u1": "ns/a"}, "deleted": {"u2": "ns/b"}, "reported": ["u3"], "reported_for": "n1",
                 "fallback_started": 1796000000.5}
    assert KubeMemo.from_dict(d) == memo
    assert KubeMemo().to_dict() == {"evicted": {}, "deleted": {}, "reported": []}
    assert memo.reported_by("n2") == frozenset()   # another notice took the drain over: said again


@pytest.mark.parametrize("bad", [{"evicted": []}, {"reported": {}}, {"reported_for": 3},
                                 {"fallback_started": "soon"}, {"fallback_started": True},
                                 {"fallback_started": float("nan")}])
def test_a_malformed_memory_is_named_not_used(bad):
    assert memo_problem(bad) and KubeMemo.problem(bad).startswith("wrong type")


def test_an_order_without_memory_gives_an_empty_one():
    now = 1796000000.0
    budget = Budget(25, 10, 10, 5)
    order = Order(notice_id="n", kind="reclaim", deadline=now + 60, received_at=now, budget=budget,
                  ends=phase_ends(now, now + 60, budget), cordon_only=False, taint_key="sco.io/notice",
                  pdb_blocked="report", exclude_from_lb=False)
    assert drain_spec(order, build({"kubernetes": {"api_url": "http://127.0.0.1:1"}})).memo == KubeMemo()
