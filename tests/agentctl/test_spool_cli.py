"""sco-agentctl spool stat | tail [-n N] [-f] | dump [--from-head]: read-only, safe while the spool runs."""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import ujson

from agentctl import __main__ as ctl
from agentctl.spool_cli import main
from spool.ring import SpoolRing
from tests.spool.harness import REPO, Sender, SpoolProcess, spool_config, spool_file


def event(i: int) -> bytes:
    return json.dumps({"event_id": f"e-{i}", "type": "drain.evicted", "data": {"pad": "x" * 200}}).encode()


def lines(text: str) -> list[dict]:
    return [ujson.loads(line) for line in text.splitlines()]


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    """A config whose spool file holds e-0..e-19, the first 5 shipped (released)."""
    cfg = spool_config(tmp_path)
    path = spool_file(cfg)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with SpoolRing.open(path, 1 << 20) as ring:
        res = ring.append([event(i) for i in range(20)])
        ring.sync()
        ring.release(res.first_seq + 4)
    return cfg


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_stat(cfg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "--config", str(cfg), "stat")
    stats = json.loads(out)
    assert rc == 0
    assert stats["unshipped_records"] == 15 and stats["size"] == 1 << 20
    assert stats["oldest_unshipped_at"].endswith("Z")


def test_tail_prints_the_newest_n(cfg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "--config", str(cfg), "tail", "-n", "3")
    assert rc == 0 and [e["event_id"] for e in lines(out)] == ["e-17", "e-18", "e-19"]


def test_dump_prints_everything_still_in_the_file_or_only_the_unshipped(cfg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--config", str(cfg), "dump")
    assert [e["event_id"] for e in lines(out)] == [f"e-{i}" for i in range(20)]
    _, out, _ = run(capsys, "--config", str(cfg), "dump", "--from-head")
    assert [e["event_id"] for e in lines(out)] == [f"e-{i}" for i in range(5, 20)]


def test_the_agentctl_dispatcher_passes_config_through(cfg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ctl.main(["--config", str(cfg), "spool", "tail", "-n", "1"]) == 0
    assert [e["event_id"] for e in lines(capsys.readouterr().out)] == ["e-19"]


def test_a_missing_file_or_bad_config_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "--config", str(spool_config(tmp_path)), "stat")
    assert rc == 1 and "no spool file" in err
    rc, _, err = run(capsys, "--config", str(tmp_path / "nope.toml"), "stat")
    assert rc == 2 and "nope.toml" in err


def test_stat_and_dump_while_the_spool_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = spool_config(tmp_path)
    with SpoolProcess(cfg) as sp, Sender(cfg, rate_hz=300) as tx:
        tx.wait_acked(100)
        for _ in range(5):
            rc, out, _ = run(capsys, "--config", str(cfg), "stat")
            assert rc == 0 and json.loads(out)["unshipped_records"] > 0
            rc, out, _ = run(capsys, "--config", str(cfg), "dump")
            assert rc == 0 and all(e["type"] == "drain.evicted" for e in lines(out))
        tx.set_rate(0)
        tx.wait_all_acked()
        assert sp.stop() == 0


class Follower:
    """``python -m agentctl.spool_cli ... tail -f`` as a child; its stdout lines land in a queue."""

    def __init__(self, *argv: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "agentctl.spool_cli", *argv], cwd=REPO,
                                     env=dict(os.environ, PYTHONPATH=str(REPO)),
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def take(self, n: int, timeout: float = 10.0) -> list[str]:
        return [ujson.loads(self.lines.get(timeout=timeout))["event_id"] for _ in range(n)]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def test_tail_follow_sees_every_new_record_once_in_order_across_wraps(tmp_path: Path) -> None:
    path = str(tmp_path / "spool.dat")
    ring = SpoolRing.open(path, 64 * 1024)   # ~190 records of this size: 300 go round it
    ring.append([event(i) for i in range(3)])
    ring.sync()
    tail = Follower("--file", path, "tail", "-n", "2", "-f", "--interval", "0.02")
    try:
        assert tail.take(2) == ["e-1", "e-2"]
        for first in range(3, 303, 10):
            got = ring.append([event(i) for i in range(first, first + 10)])
            ring.sync()
            ring.release(got.last_seq)           # shipped: room for the next lap
            assert tail.take(10) == [f"e-{i}" for i in range(first, first + 10)]
        assert ring.stats()["next_seq"] - ring.stats()["epoch"] * 2**32 == 303
        ring.close()
        ring = SpoolRing.open(path, 64 * 1024)   # a restart: a new epoch, seqs jump
        ring.append([event(1000)])
        ring.sync()
        assert tail.take(1) == ["e-1000"]
        ring.append([event(1001)])
        ring.sync()
        assert tail.take(1) == ["e-1001"]         # nothing printed twice in between
    finally:
        tail.stop()
        ring.close()


def test_poison_prints_what_was_set_aside(cfg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from spool import poison

    path = os.path.join(os.path.dirname(spool_file(cfg)), poison.POISON_FILE)
    rc, out, _ = run(capsys, "--config", str(cfg), "poison")
    assert (rc, out) == (0, "")                                # nothing ever set aside
    for i in (3, 4):
        poison.append(path, poison.entry(i, event(i), 400, "Failed decoding body: x", 3, "2026-01-01T00:00:00Z"))
    rc, out, _ = run(capsys, "--config", str(cfg), "poison")
    assert rc == 0 and [(e["event_id"], e["seq"], e["status"]) for e in lines(out)] == [("e-3", 3, 400), ("e-4", 4, 400)]
    rc, out, _ = run(capsys, "--config", str(cfg), "poison", "--raw")
    assert [e["event_id"] for e in lines(out)] == ["e-3", "e-4"]


def test_the_poison_file_stays_bounded_and_keeps_the_newest(tmp_path: Path) -> None:
    from spool import poison

    path = str(tmp_path / poison.POISON_FILE)
    evicted = sum(poison.append(path, poison.entry(i, event(i), 400, "m", 3, "t"), max_bytes=4000)
                  for i in range(40))
    kept = [e["event_id"] for e in poison.read(path)]
    assert os.path.getsize(path) <= 4000 and evicted == 40 - len(kept) > 0
    assert kept == [f"e-{i}" for i in range(40 - len(kept), 40)]
    with open(path, "ab") as f:
        f.write(b'{"torn')                                      # a crash mid-append
    assert [e["event_id"] for e in poison.read(path)] == kept
    poison.append(path, poison.entry(99, event(99), 400, "m", 3, "t"), max_bytes=1 << 20)
    assert [e["event_id"] for e in poison.read(path)] == [*kept, "e-99"]
