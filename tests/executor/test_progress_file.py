"""executor.progress_file: the records a drain still needs are kept, the rest bounded; the file stays readable."""
from __future__ import annotations

import io

from common.contract import BUILTIN
from common.log import Logger
from common.wire import DrainState
from executor import progress_file
from tests.support.drain_records import record


def test_prune_keeps_every_record_a_drain_needs_and_only_the_newest_past_ones():
    records = {f"old-{i}": record(received_at=float(i), state=DrainState.WITHDRAWN) for i in range(100)}
    records["active"] = record(received_at=0.0, state=DrainState.DONE)           # still active: would restart
    records["running"] = record(received_at=0.0)                                   # running
    records["undo"] = record(received_at=0.0, state=DrainState.DONE)             # withdrawn, cordon not lifted
    records["gone"] = record(received_at=0.5, state=DrainState.ENDED)            # over, its notice forgotten
    dropped = progress_file.prune(records, active={"active"}, withdrawn={"undo", "old-99"})
    assert {"active", "running", "undo"} <= set(records)
    past = sorted(nid for nid in records if nid.startswith("old-") or nid == "gone")
    assert len(past) == progress_file.MAX_PAST
    assert past == sorted(f"old-{i}" for i in range(100 - progress_file.MAX_PAST, 100))   # the newest
    assert "gone" in dropped and len(dropped) == 101 - progress_file.MAX_PAST


def test_prune_under_the_bound_drops_nothing():
    records = {f"n{i}": record(received_at=float(i), state=DrainState.WITHDRAWN) for i in range(10)}
    assert progress_file.prune(records, active=set(), withdrawn=set()) == [] and len(records) == 10


def test_a_progress_file_too_large_to_load_back_is_not_written(tmp_path):
    out = io.StringIO()
    log, path = Logger("executor", stream=out), str(tmp_path / "executor.json")
    assert progress_file.save(path, {"n1": record(received_at=1.0)}, log)
    huge = {"n1": record(received_at=1.0, memo={"evicted": {f"uid-{i}": "ns/" + "p" * 200 for i in range(20000)}})}
    assert progress_file.save(path, huge, log) is False
    assert set(progress_file.load(path, BUILTIN, log)) == {"n1"}
    assert "state.too_large" in out.getvalue()
