"""The shipper thread against the Vector emulator: in order, at least once, bad records set aside.

The store and the shipper run in the test process (backoff shortened, so
"down for a long time" is many failed attempts, not many minutes); the
emulator answers like deploy/vector's http_server source.
"""
from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.log import Logger
from spool import poison
from spool.shipper import Shipper
from spool.shipping import POISON_STRIKES, ShipPolicy
from spool.store import Store
from tests.emulators.vector import VectorEmulator
from tests.support.procutil import free_port
from tests.support.wait import wait_for

FAST = {"backoff_base_s": 0.01, "backoff_cap_s": 0.1, "timeout_s": 5.0}   # a ShipPolicy's fields


def event(i: int, type_: str = "drain.evicted") -> bytes:
    return json.dumps({"event_id": f"e-{i:05d}", "seq": i, "type": type_, "data": {"pad": "x" * 100}}).encode()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(str(tmp_path / "spool.dat"), 1 << 20)
    s.open()
    yield s
    s.close()


@pytest.fixture
def vec() -> Iterator[VectorEmulator]:
    with VectorEmulator(path="/events") as v:
        yield v


def start_shipper(store: Store, url: str | None, batch_max: int = 50, **options: float) -> Shipper:
    shipper = Shipper(store, Logger("shipper", stream=io.StringIO()), url, batch_max,
                      policy=ShipPolicy(**{**FAST, **options}), rng=random.Random(1))
    shipper.start()
    return shipper


def write(store: Store, first: int, n: int, per_write: int = 25) -> list[str]:
    for i in range(first, first + n, per_write):
        store.write([event(j) for j in range(i, min(first + n, i + per_write))])
    return [f"e-{j:05d}" for j in range(first, first + n)]


def ids(records: list[dict]) -> list[str]:
    return [r["event_id"] for r in records]


def drained(store: Store) -> bool:
    return store.stats()["unshipped_records"] == 0


def test_vector_down_for_long_then_back_gets_everything_in_order(store: Store, vec: VectorEmulator) -> None:
    vec.refuse()
    shipper = start_shipper(store, vec.url)
    try:
        sent = write(store, 0, 300)
        wait_for(lambda: shipper.attempts >= 15, 10, "many failed attempts while Vector is down")
        sent += write(store, 300, 100)          # still arriving while Vector is away
        assert store.stats()["unshipped_records"] == 400
        vec.accept()
        assert ids(vec.wait_for_records(400)) == sent
        wait_for(lambda: drained(store), 5, "every record released")
        assert vec.stats()["duplicates"] == {}
    finally:
        shipper.stop()


def test_5xx_and_lost_answers_are_retried_at_least_once_in_order(store: Store, vec: VectorEmulator) -> None:
    vec.fail_next(3, status=503)
    vec.lose_acks(2)                           # delivered, then answered 500: shipped again
    vec.fail_next(1, status=429, retry_after="0")
    shipper = start_shipper(store, vec.url)
    try:
        sent = write(store, 0, 200)
        wait_for(lambda: drained(store), 10, "every record released")
        got = ids(vec.records())
        first_seen = list(dict.fromkeys(got))
        assert first_seen == sent              # nothing lost, first arrivals in order
        assert len(got) > len(sent)            # the lost answers made duplicates, as they must
    finally:
        shipper.stop()


def test_a_poisoned_record_is_set_aside_and_the_rest_delivered(store: Store, vec: VectorEmulator) -> None:
    """Only the record Vector cannot decode, refused alone POISON_STRIKES times, goes to the poison file,
    with a spool.poison report naming its event_id; every other record is delivered, in order."""
    vec.poison("event_id", "e-00037")
    shipper = start_shipper(store, vec.url)
    try:
        sent = write(store, 0, 100)
        wait_for(lambda: drained(store), 10, "every record released")
        assert ids(vec.records()) == [i for i in sent if i != "e-00037"]
        assert shipper.set_aside == 1
        [(_, type_, data)] = store.take_reports()
        assert type_ == "spool.poison"
        assert data["event_id"] == "e-00037" and data["status"] == 400 and data["strikes"] == POISON_STRIKES
        assert data["message"].startswith("Failed decoding body") and data["kept_in"] == "spool.poison"
        [kept] = list(poison.read(str(Path(store.path).parent / "spool.poison")))
        assert kept["event_id"] == "e-00037" and json.loads(kept["record"])["seq"] == 37
        alone = [r for r in vec.requests("/events") if r["status"] == 400]
        assert len(alone) >= POISON_STRIKES
    finally:
        shipper.stop()


@pytest.mark.parametrize("status", [400, 500])
def test_a_failing_sink_keeps_every_record(store: Store, vec: VectorEmulator, status: int) -> None:
    """400 "Contents failed to deliver to sink" / 500 "Error delivering contents to sink" are Kafka's trouble,
    not the records': nothing is split off or set aside, everything goes once Kafka is back."""
    vec.kafka_down(status)
    shipper = start_shipper(store, vec.url)
    try:
        sent = write(store, 0, 120)
        wait_for(lambda: vec.stats()["sink_failed_batches"] >= 20, 10, "many refusals by the sink")
        assert shipper.set_aside == 0 and store.take_reports() == []
        assert store.stats()["unshipped_records"] == 120
        vec.kafka_up()
        wait_for(lambda: drained(store), 10, "every record released")
        assert ids(vec.records()) == sent and shipper.set_aside == 0
    finally:
        shipper.stop()


def test_a_wrong_path_sets_nothing_aside(store: Store, vec: VectorEmulator) -> None:
    """404 means the URL is wrong, not the records: keep them and keep trying."""
    shipper = start_shipper(store, vec.base_url + "/wrong")
    try:
        write(store, 0, 20)
        wait_for(lambda: shipper.attempts >= 5, 10, "several attempts")
        assert shipper.set_aside == 0 and store.take_reports() == []
        assert store.stats()["unshipped_records"] == 20
        shipper.retarget(vec.url)               # the operator fixes the URL
        wait_for(lambda: drained(store), 10, "every record released")
        assert len(vec.records()) == 20
    finally:
        shipper.stop()


def test_a_timeout_is_retried(store: Store, vec: VectorEmulator) -> None:
    vec.hang(3.0, batches=1)
    shipper = start_shipper(store, vec.url, timeout_s=0.3)
    try:
        sent = write(store, 0, 30)
        wait_for(lambda: drained(store), 10, "every record released")
        assert ids(vec.records()) == sent
    finally:
        shipper.stop()


def test_no_sink_holds_everything_until_one_is_named(store: Store, vec: VectorEmulator) -> None:
    shipper = start_shipper(store, None)
    try:
        write(store, 0, 10)
        assert shipper.attempts == 0 and store.stats()["unshipped_records"] == 10
        shipper.retarget(vec.url)
        assert len(vec.wait_for_records(10)) == 10
    finally:
        shipper.stop()


def test_stop_is_prompt_even_while_backing_off(store: Store) -> None:
    shipper = start_shipper(store, f"http://127.0.0.1:{free_port()}/events",
                            backoff_base_s=30.0, backoff_cap_s=30.0)
    write(store, 0, 5)
    wait_for(lambda: shipper.attempts >= 1, 5, "a failed attempt")
    assert shipper.stop(timeout_s=5.0)          # not after the 15-30 s backoff
    assert store.stats()["unshipped_records"] == 5


def test_a_failing_streak_is_said_at_its_start_and_its_count_when_it_ends(store: Store, vec: VectorEmulator) -> None:
    """One recorder (common/recorder.py): the first failure at once, the rest counted (not one line per
    attempt), said when the streak ends, then ship.recovered; a new streak is said at once again."""
    out = io.StringIO()
    vec.refuse()
    shipper = Shipper(store, Logger("shipper", stream=out), vec.url, 50, policy=ShipPolicy(**FAST),
                      rng=random.Random(1))
    shipper.start()

    def lines(msg: str) -> list[dict]:
        return [r for r in map(json.loads, out.getvalue().splitlines()) if r["msg"] == msg]

    try:
        write(store, 0, 20)
        wait_for(lambda: shipper.attempts >= 10, 10, "many failed attempts while Vector is down")
        assert len(lines("ship.failing")) == 1 and lines("ship.failing")[0]["count"] == 1
        vec.accept()
        wait_for(lambda: drained(store), 10, "every record released")
        failing, [recovered] = lines("ship.failing"), lines("ship.recovered")
        assert len(failing) == 2
        assert sum(f["count"] for f in failing) == failing[-1]["total"] == recovered["failed_attempts"]
        vec.refuse()
        write(store, 20, 5)
        wait_for(lambda: len(lines("ship.failing")) >= 3, 10, "the next streak said at once")
        assert lines("ship.failing")[2]["count"] == 1
    finally:
        shipper.stop()
