"""The per-process outbox journal: on disk before emit returns, replayed after a crash, bounded, damage survived."""
from __future__ import annotations

import errno
import io
import json
import os
from pathlib import Path

import pytest
import zmq

from common import journal as journal_mod
from common.config import load
from common.journal import Journal, journal_path
from common.log import Logger
from common.runtime import SpoolLink
from tests.support.agent_rig import write_config


def ev(i: int) -> dict:
    return {"event_id": f"e-{i}", "seq": i, "source": "executor-1-2", "type": "drain.evicted", "data": {"i": i}}


def pending_of(events: list[dict]) -> dict:
    return {e["event_id"]: (0.0, e) for e in events}


def test_appended_events_are_replayed_by_the_next_open(tmp_path: Path) -> None:
    path = str(tmp_path / "outbox" / "executor.journal")
    j = Journal(path)
    assert j.active and j.replayed == []
    for i in range(3):
        assert j.append(ev(i))
    j.close()
    again = Journal(path)
    assert [e["event_id"] for e in again.replayed] == ["e-0", "e-1", "e-2"] and again.errors == []
    assert again.replayed[1] == ev(1)                          # the same event: id, source and seq


def test_nothing_pending_empties_the_file_and_a_mostly_acked_one_is_rewritten(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "j")
    j = Journal(path)
    for i in range(3):
        j.append(ev(i))
    j.settle(pending_of([]))
    assert os.path.getsize(path) == 0 and j.size == 0
    monkeypatch.setattr(journal_mod, "COMPACT_MIN_BYTES", 200)
    for i in range(10):
        j.append(ev(i))
    j.acked([f"e-{i}" for i in range(9)])
    j.settle(pending_of([ev(9)]))
    assert os.path.getsize(path) == j.size == len(journal_mod.encode(ev(9)))
    j.append(ev(10))                                           # appends go on after the rewrite
    j.close()
    assert [e["event_id"] for e in Journal(path).replayed] == ["e-9", "e-10"]


def test_the_file_stays_bounded_while_no_ack_comes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_mod, "MAX_BYTES", 2000)
    j = Journal(str(tmp_path / "j"))
    kept = []
    for i in range(100):
        j.append(ev(i))
        kept = [*kept[-4:], ev(i)]                              # what the Outbox still holds (its limit)
        j.bound(pending_of(kept))
        assert j.size <= 2000 + len(journal_mod.encode(ev(i)))
    j.close()
    replayed = [e["event_id"] for e in Journal(str(tmp_path / "j")).replayed]
    assert replayed[-len(kept):] == [e["event_id"] for e in kept] and len(replayed) < 30


def test_a_torn_last_line_is_ignored_and_the_file_repaired(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    j = Journal(path)
    j.append(ev(0))
    j.close()
    with open(path, "ab") as f:
        f.write(b'{"event_id": "e-1", "ty')                     # SIGKILL mid-append: emit never returned
    again = Journal(path)
    assert [e["event_id"] for e in again.replayed] == ["e-0"] and again.errors == []
    again.append(ev(2))
    again.close()
    assert [e["event_id"] for e in Journal(path).replayed] == ["e-0", "e-2"]


def test_a_corrupt_journal_is_reported_and_its_good_lines_replayed(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    with open(path, "wb") as f:
        f.write(journal_mod.encode(ev(0)) + b"\x00\xffgarbage\n" + b'["not an event"]\n' + journal_mod.encode(ev(1)))
    j = Journal(path)
    assert [e["event_id"] for e in j.replayed] == ["e-0", "e-1"]
    assert j.errors == [{"op": "corrupt", "path": path, "bad_lines": 2, "replayed": 2}]
    j.close()
    assert Journal(path).errors == []                          # repaired: said once


def test_a_second_owner_gets_no_journal_and_says_why(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    first = Journal(path)
    second = Journal(path)
    assert first.active and not second.active and second.errors[0]["op"] == "locked"
    assert not second.append(ev(0))


def test_a_refusing_disk_keeps_the_process_going_and_is_said_once(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    j = Journal(str(tmp_path / "j"))
    assert j.append(ev(0))

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", full)
    assert not j.append(ev(1)) and not j.append(ev(2))
    assert [e["op"] for e in j.errors] == ["append"] and j.failed_appends == 2
    monkeypatch.undo()
    assert j.append(ev(3))
    assert j.errors[-1] == {"op": "append_recovered", "failed_appends": 2, "path": j.path}
    j.close()
    assert [e["event_id"] for e in Journal(j.path).replayed] == ["e-0", "e-3"]   # no half line left


def test_an_unopenable_journal_is_reported_not_fatal(tmp_path: Path) -> None:
    blocker = tmp_path / "outbox"
    blocker.write_text("a file where the directory should be")
    j = Journal(str(blocker / "x.journal"))
    assert not j.active and j.errors[0]["op"] == "open" and j.replayed == []


# -- through SpoolLink --------------------------------------------------------------------------
def link_config(tmp_path: Path) -> str:
    path = str(tmp_path / "agent.toml")
    write_config(path, {"node": {"name": "node-a", "hall": "h1"},
                        "paths": {"runtime_dir": str(tmp_path / "run"), "state_dir": str(tmp_path / "state")}})
    os.makedirs(tmp_path / "run", mode=0o700, exist_ok=True)
    return path


def test_spoollink_replays_what_a_killed_run_emitted_with_the_same_ids(tmp_path: Path) -> None:
    cfg = load(link_config(tmp_path))
    ctx = zmq.Context()
    try:
        out = io.StringIO()
        first = SpoolLink(ctx, cfg, "executor", Logger("executor", stream=out))
        sent = [first.emit("drain.started", notice_id="n1")["event_id"] for _ in range(3)]
        # Each id is logged as emitted: what bench.chaos counts from.
        assert [json.loads(line)["event_id"] for line in out.getvalue().splitlines()
                if json.loads(line)["msg"] == "event.emitted"] == sent
        first.close()                                           # (a SIGKILL: the spool never acked)
        again = SpoolLink(ctx, cfg, "executor", Logger("executor", stream=io.StringIO()))
        assert list(again.outbox.pending) == sent
        # Acked in part: still all in the file (rewritten only when large); a replay the spool dedupes.
        again.acked(sent[:2])
        again.close()
        third = SpoolLink(ctx, cfg, "executor", Logger("executor", stream=io.StringIO()))
        assert list(third.outbox.pending) == sent
        third.acked(sent)                                        # all acked: the file is emptied
        third.close()
        fourth = SpoolLink(ctx, cfg, "executor", Logger("executor", stream=io.StringIO()))
        assert list(fourth.outbox.pending) == []
        fourth.close()
        assert journal_path(cfg.paths.state_dir, "executor").startswith(cfg.paths.state_dir)
    finally:
        ctx.destroy(linger=0)


def test_spoollink_reports_a_corrupt_journal_as_an_event(tmp_path: Path) -> None:
    cfg = load(link_config(tmp_path))
    path = journal_path(cfg.paths.state_dir, "watcher")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"garbage\n")
    ctx = zmq.Context()
    try:
        out = io.StringIO()
        link = SpoolLink(ctx, cfg, "watcher", Logger("watcher", stream=out))
        [pending] = [e for _, e in link.outbox.pending.values()]
        assert pending["type"] == "outbox.journal_error" and pending["data"]["bad_lines"] == 1
        assert '"msg":"outbox.journal_error"' in out.getvalue()
        link.close()
    finally:
        ctx.destroy(linger=0)
