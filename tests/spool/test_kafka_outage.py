"""Kafka away behind Vector, as Vector really answers it: nothing lost, nothing set aside, order kept.

The spool runs as its own process with its production shipping policy (backoff
up to 30 s, full jitter); the Vector emulator answers from Vector's source
(tests/emulators/vector.py): while Kafka is down each batch is answered, after
the kafka sink's message_timeout_ms (30 s in deploy/vector), with 400
"Contents failed to deliver to sink", or at once with 500 "Error delivering
contents to sink". The outage lasts two minutes of real time: the shipper's
backoff and Vector's holds are the real ones, so nothing here is scaled.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agentctl.spool_cli import main as spool_cli
from spool.reader import read_stats
from tests.emulators.vector import VectorEmulator
from tests.spool.harness import Sender, SpoolProcess, spool_config, spool_file
from tests.support.wait import wait_for

OUTAGE_S = 120.0
KAFKA_TIMEOUT_S = 30.0        # deploy/vector: message_timeout_ms = 30000
BACK_WITHIN_S = 120.0         # the shipper's backoff cap (30 s) and one held answer, with room to spare


def first_arrivals(records: Iterable[dict[str, Any]], source_prefix: str = "") -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for r in records:
        if str(r.get("source", "")).startswith(source_prefix):
            seen.setdefault(r["event_id"], r)
    return list(seen.values())


def in_seq_order_per_source(records: list[dict[str, Any]]) -> bool:
    last: dict[str, int] = {}
    for r in records:
        if r["seq"] <= last.get(r["source"], 0):
            return False
        last[r["source"]] = r["seq"]
    return True


def dropped_reported(records: Iterable[dict[str, Any]]) -> int:
    return sum(r["data"]["dropped"] for r in first_arrivals(records) if r["type"] == "spool.dropped")


def kafka_down_for_two_minutes(base: Path, status: int) -> None:
    with VectorEmulator(path="/events") as vec:
        cfg = spool_config(base, vector_url=vec.url)
        with SpoolProcess(cfg) as sp, Sender(cfg, rate_hz=4.0) as tx:
            wait_for(lambda: len(vec.records()) >= 4, 20, "events delivered before the outage")
            vec.kafka_down(status, hold_s=KAFKA_TIMEOUT_S if status == 400 else 0.0)
            before = len(vec.records())
            down_until = time.monotonic() + OUTAGE_S
            wait_for(lambda: time.monotonic() >= down_until, OUTAGE_S + 5, "two minutes of outage", interval=1.0)
            tx.set_rate(0.0)
            failed = vec.stats()["sink_failed_batches"]
            assert failed >= 3, f"{status}: the outage was barely felt ({failed} refusals)"
            assert len(vec.records()) == before                 # nothing got through meanwhile
            assert sp.logged("spool.poison") == [] and sp.logged("spool.dropped") == []
            vec.kafka_up()
            emitted = list(tx.emitted)
            assert len(emitted) >= 4 * OUTAGE_S * 0.9

            def all_there() -> bool:
                got = {r["event_id"] for r in vec.records()}
                return set(emitted) <= got and read_stats(spool_file(cfg))["unshipped_records"] == 0

            wait_for(all_there, BACK_WITHIN_S, f"{status}: every emitted event in Vector", interval=0.5)
            assert sp.stop() == 0
        records = vec.records()
    mine = first_arrivals(records, "executor-")
    assert [r["event_id"] for r in mine] == emitted               # every one, in emission order
    assert in_seq_order_per_source(mine)
    assert dropped_reported(records) == 0 and not any(r["type"] == "spool.poison" for r in records)
    assert sp.logged("spool.dropped") == [] and sp.logged("spool.poison") == []
    assert sp.logged("ship.recovered")


def test_kafka_down_two_minutes_with_400_then_with_500_every_event_arrives(tmp_path: Path) -> None:
    """Both outages run side by side (two spools, two Vectors): the same two minutes of wall time."""
    with ThreadPoolExecutor(2) as pool:
        runs = {status: pool.submit(kafka_down_for_two_minutes, tmp_path / f"k{status}", status)
                for status in (400, 500)}
        for run in runs.values():
            run.result(timeout=OUTAGE_S + BACK_WITHIN_S + 120)


def test_the_spool_wraps_in_a_long_outage_exactly_the_dropped_are_missing(tmp_path: Path) -> None:
    """A 1 MiB spool, Kafka down while two processes emit ~1.5 MB: the oldest go, counted in spool.dropped.
    Kafka back: exactly that many of the emitted events are missing, and the rest arrive, per process in seq
    order. The shipper never ships a record the ring dropped while it waited (it reads the batch again)."""
    with VectorEmulator(path="/events") as vec:
        cfg = spool_config(tmp_path, size_mb=1, vector_url=vec.url)
        vec.kafka_down(400)
        with SpoolProcess(cfg) as sp, Sender(cfg, process="executor") as tx1, Sender(cfg, process="watcher") as tx2:
            for _ in range(3):
                tx1.emit(600)
                tx2.emit(600)
                tx1.wait_all_acked(30)
                tx2.wait_all_acked(30)
            emitted = [*tx1.emitted, *tx2.emitted]
            logged = sum(r["dropped"] for r in sp.logged("spool.dropped"))
            assert logged > 0
            vec.kafka_up()

            def shipped() -> list[dict[str, Any]] | None:
                got = vec.records()
                done = dropped_reported(got) >= logged and read_stats(spool_file(cfg))["unshipped_records"] == 0
                return got if done else None

            records = wait_for(shipped, BACK_WITHIN_S, "the spool shipped, with every drop reported", interval=0.5)
            assert sp.stop() == 0
    arrived = first_arrivals(records)
    arrived_ids = {r["event_id"] for r in arrived}
    missing = [e for e in emitted if e not in arrived_ids]
    assert len(missing) == dropped_reported(records) == logged
    for prefix, tx in (("executor-", tx1), ("watcher-", tx2)):
        mine = [r for r in arrived if r["source"].startswith(prefix)]
        assert in_seq_order_per_source(mine)
        kept = [r["event_id"] for r in mine]
        assert kept == [e for e in tx.emitted if e in arrived_ids]
    assert not any(r["type"] == "spool.poison" for r in records)


def test_a_poison_record_among_good_ones_only_it_is_set_aside(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Vector cannot decode one record (400 "Failed decoding body: ..."): refused alone three times, it goes to
    the poison file, a spool.poison event names its event_id, `sco-agentctl spool poison` prints it; every other
    record is delivered, in order."""
    with VectorEmulator(path="/events") as vec:
        vec.poison("data.n", 37)
        cfg = spool_config(tmp_path, vector_url=vec.url)
        with SpoolProcess(cfg) as sp, Sender(cfg) as tx:
            tx.emit(100)
            tx.wait_all_acked(20)
            wait_for(lambda: [r for r in vec.records() if r["type"] == "spool.poison"], 60, "the spool.poison event")
            wait_for(lambda: read_stats(spool_file(cfg))["unshipped_records"] == 0, 30, "everything shipped")
            assert sp.stop() == 0
        records = vec.records()
    bad = tx.emitted[37]
    [report] = [r for r in first_arrivals(records) if r["type"] == "spool.poison"]
    assert report["data"]["event_id"] == bad and report["data"]["status"] == 400
    assert report["data"]["message"].startswith("Failed decoding body")
    good = [r["event_id"] for r in first_arrivals(records, "executor-")]
    assert good == [e for e in tx.emitted if e != bad]
    [logged] = sp.logged("spool.poison")
    assert logged["event_id"] == bad
    assert spool_cli(["--config", str(cfg), "poison"]) == 0
    out = capsys.readouterr().out
    assert [(item["event_id"], item["status"]) for item in map(json.loads, out.splitlines())] == [(bad, 400)]
