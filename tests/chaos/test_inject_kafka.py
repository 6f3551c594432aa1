"""The chaos injector's Kafka faults: what the shipper hears from Vector while they last, and after.

Against the in-process Vector emulator (tests/emulators/vector.py, which models the answers from
Vector's handle_batch_status): the fault is what the injector applies, the answer is the emulator's.
"""
from __future__ import annotations

import http.client
import json
import time
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

from tests.chaos import inject
from tests.chaos.inject import Injector
from tests.chaos.plan import KUBE_KINDS, TARGET, Fault
from tests.emulators.vector import SINK_ERRORED, SINK_REJECTED, VectorEmulator


def post(url: str, events: list[dict]) -> tuple[int, str, float]:
    """(status, body, seconds the answer took) of one NDJSON batch, as the shipper sends it."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    started = time.monotonic()
    try:
        conn.request("POST", u.path, body="".join(json.dumps(e) + "\n" for e in events).encode(),
                     headers={"Content-Type": "application/x-ndjson"})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(), time.monotonic() - started
    finally:
        conn.close()


@pytest.mark.parametrize(("kind", "status", "message"), [("kafka_400", 400, SINK_REJECTED),
                                                         ("kafka_500", 500, SINK_ERRORED)])
def test_a_kafka_fault_fails_every_batch_until_reverted_then_vector_delivers(kind: str, status: int, message: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inject, "KAFKA_HOLD_S", 0.3)
    assert kind in KUBE_KINDS and TARGET[kind] == "vector"   # drawn by random plans; never beside vector_down
    with VectorEmulator(path="/events") as vec:
        injector = Injector(SimpleNamespace(vector=vec), disk=False)
        fault = Fault(kind, 0.0, 1.0)
        assert injector.apply(fault)
        for i in range(2):
            got, body, took = post(vec.url, [{"event_id": f"e-{i}", "type": "drain.evicted"}])
            assert (got, json.loads(body)["message"]) == (status, message)
            if kind == "kafka_400":   # Rejected: the kafka sink's delivery timed out first
                assert took >= 0.3
        assert vec.records() == [] and vec.stats()["sink_failed_batches"] == 2
        injector.revert(fault)
        assert post(vec.url, [{"event_id": "e-2", "type": "drain.evicted"}])[0] == 200
        assert [r["event_id"] for r in vec.records()] == ["e-2"]
