"""bench.emit measures what it says: its two peers differ in the journal's fsync and nothing else,
and its drain count reads every program's ``event.emitted`` lines. Nothing here is timed."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.emit import WARMUP, one_round, percentile
from bench.emit_drain import emitted_by
from bench.spool import write_config
from common import ipc
from tests.support.fake_spool import FakeSpool


@pytest.mark.parametrize("journal", [True, False])
def test_the_peers_differ_only_in_the_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journal: bool) -> None:
    config = write_config(str(tmp_path))
    ipc.ensure_runtime_dir(str(tmp_path / "run"))
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd))[1])
    emits = WARMUP + 50
    with FakeSpool(str(tmp_path / "run")) as spool:
        got = one_round(config, "bench-peer", journal, emits)
    assert len(got["lat"]) == 50 and all(ns > 0 for ns in got["lat"]) and got["rate"] > 0
    assert got["unacked"] == 0 and len(spool.events) == emits          # every emit reached the spool
    if journal:
        assert len(syncs) >= emits and got["unjournaled"] == 0          # one fdatasync per emit, at least
        assert got["journal_bytes_after"] == 0                          # all acked: the file emptied
    else:
        assert syncs == [] and got["unjournaled"] == emits


def test_percentile_is_nearest_rank_in_microseconds() -> None:
    ns = sorted(range(1000, 101000, 1000))                             # 1..100 us
    assert (percentile(ns, 0.5), percentile(ns, 0.99), percentile([], 0.5)) == (50.0, 99.0, 0.0)


def test_the_drain_count_reads_every_program_log_supervisords_prefix_too(tmp_path: Path) -> None:
    (tmp_path / "executor.log").write_text(
        '{"ts":1,"level":"info","proc":"executor","msg":"event.emitted","event_id":"a","type":"drain.evicted"}\n'
        '{"ts":1,"level":"info","proc":"executor","msg":"drain.evicted","note":"event.emitted"}\n' * 2 + "garbage\n")
    (tmp_path / "supervisord.log").write_text(
        '2026-12-01 13:00:00,000 INFO {"ts":1,"level":"info","proc":"process_events","msg":"event.emitted",'
        '"event_id":"b","type":"agent.process_exited"}\n')
    assert emitted_by(str(tmp_path)) == {("executor", "drain.evicted"): 2,
                                         ("process_events", "agent.process_exited"): 1}
