"""executor.slurm.memo (issue 26, point 9, the Slurm half): the drain's memory is one typed record with
one codec; a record written by today's main still reads; the recipe writes the shape it always did."""
from __future__ import annotations

import io
import os

import pytest

from common.contract import BUILTIN, SlurmPolicy
from common.log import Logger
from executor import progress_file
from executor.slurm.memo import SlurmMemo, memo_problem, of_record
from executor.slurm.rules import local_plan, to_evict, unsignalled

# Written by main at 0bc60c5 (executor.progress_file.save of a running Slurm drain: a job signalled and
# requeued, one refused, one TERMed locally, the controller down), before this module existed.
FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "executor-main-0bc60c5.json")
POLICY = SlurmPolicy("SIGUSR1", "batch", "requeue")


def test_a_record_written_by_main_reads_into_the_typed_memo():
    records = progress_file.load(FIXTURE, BUILTIN, Logger("executor", stream=io.StringIO()), memo_problem)
    memo = of_record(records["n-main-slurm"].memo)
    assert memo == SlurmMemo(POLICY, signalled={"42": 1796000000.6}, evicted={"42": 1796000011.0},
                             refused={"43": "Requested operation is presently disabled for job 43"},
                             local={"checkpoint": {}, "term": {"44": 1796000012.0}, "kill": {}},
                             down_since=1796000011.5)
    # What the decisions make of it: nothing done twice.
    assert unsignalled([42, 45], memo) == [45]
    assert to_evict([42, 43], memo, 1796000013.0) == []
    assert local_plan("evict", [43, 44, 46], memo) == [(46, "SIGTERM", "full", "term")]


def test_the_memory_keeps_its_shape_and_round_trips():
    memo = SlurmMemo(POLICY, signalled={"1": 2.0}, down_since=3.0)
    d = memo.to_dict()
    assert d == {"policy": {"signal": "SIGUSR1", "signal_scope": "batch", "on_drain": "requeue"},
                 "signalled": {"1": 2.0}, "evicted": {}, "refused": {},
                 "local": {"checkpoint": {}, "term": {}, "kill": {}}, "down_since": 3.0}
    assert SlurmMemo.from_dict(d) == memo
    assert of_record({}) is None and memo_problem({}) == ""


@pytest.mark.parametrize("bad", [[], {"policy": {}}, {**SlurmMemo(POLICY).to_dict(), "local": {"term": {}}},
                                 {**SlurmMemo(POLICY).to_dict(), "evicted": {"1": "soon"}},
                                 {**SlurmMemo(POLICY).to_dict(), "down_since": "x"}])
def test_a_malformed_memory_is_named_not_used(bad):
    assert memo_problem({"slurm": bad}) == "slurm memo is malformed"
