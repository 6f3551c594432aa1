"""The Vector emulator answers like an http_server source with acknowledgements on.

Also checks deploy/vector/vector.toml says what the emulator assumes.
"""
from __future__ import annotations

import gzip
import json
import threading
import tomllib
import zlib
from collections.abc import Iterator

import psutil
import pytest
import requests

from tests.emulators._process import REPO_ROOT
from tests.emulators.vector import Poison, VectorEmulator, decode_batch
from tests.emulators.vector_fixture import VectorProcess, vector_process


@pytest.fixture
def vec() -> Iterator[VectorEmulator]:
    with VectorEmulator(path="/events", seed=3) as emulator:
        yield emulator


def ndjson(*ids: str, **extra: object) -> bytes:
    return b"".join(json.dumps({"event_id": i, "node": "n1", **extra}).encode() + b"\n"
                    for i in ids)


def post(vec: VectorEmulator, body: bytes, timeout: float = 5,
         **headers: str) -> requests.Response:
    return requests.post(vec.url, data=body, headers=headers, timeout=timeout)


def ids(records: list[dict]) -> list[str]:
    return [r["event_id"] for r in records]


# -- decoding -------------------------------------------------------------------------

def test_ndjson_batch_is_recorded_in_order_then_200(vec: VectorEmulator) -> None:
    """A 200 (empty body) means every record of the batch is recorded, in order."""
    reply = post(vec, ndjson("a", "b", "c"))
    assert (reply.status_code, reply.content) == (200, b"")
    post(vec, ndjson("d") + b"\n\n" + ndjson("e"))  # blank lines are skipped
    assert ids(vec.records()) == ["a", "b", "c", "d", "e"]
    assert vec.stats()["delivered_batches"] == 2


def test_json_array_on_one_line_becomes_one_event_per_element(vec: VectorEmulator) -> None:
    """Vector's json codec splits a top-level array into events."""
    body = json.dumps([{"event_id": "x"}, {"event_id": "y"}]).encode()
    assert post(vec, body).status_code == 200
    assert ids(vec.records()) == ["x", "y"]


def test_pretty_printed_array_needs_bytes_framing() -> None:
    """Newline framing cannot read a multi-line array; 'bytes' framing can."""
    body = json.dumps([{"event_id": "x"}, {"event_id": "y"}], indent=2).encode()
    with pytest.raises(ValueError):
        decode_batch(body, "newline_delimited")
    assert ids(decode_batch(body, "bytes")) == ["x", "y"]


@pytest.mark.parametrize("body", [b'{"event_id": "a"}\n{not json}\n', b"[1, 2]\n", b'"text"\n',
                                  b'{"event_id": "a"}\n42\n'])
def test_undecodable_batch_is_400_and_nothing_is_kept(vec: VectorEmulator, body: bytes) -> None:
    """Invalid JSON or a non-object event refuses the whole batch with Vector's error shape."""
    reply = post(vec, body)
    assert reply.status_code == 400
    assert reply.json()["code"] == 400 and reply.json()["message"]
    assert vec.records() == []


def test_compressed_bodies(vec: VectorEmulator) -> None:
    """gzip and deflate are decoded; an unknown encoding is 415; corrupt gzip is 422 (encoding.rs)."""
    assert post(vec, gzip.compress(ndjson("g")), **{"Content-Encoding": "gzip"}).status_code == 200
    assert post(vec, zlib.compress(ndjson("d")), **{"Content-Encoding": "deflate"}).status_code \
        == 200
    assert post(vec, ndjson("b"), **{"Content-Encoding": "br"}).status_code == 415
    corrupt = post(vec, gzip.compress(ndjson("t"))[:-8], **{"Content-Encoding": "gzip"})
    assert corrupt.status_code == 422
    assert corrupt.json()["message"] == "Failed decompressing payload with gzip decoder."
    assert post(vec, ndjson("b"), **{"Content-Encoding": "br"}).json()["message"] == "Unsupported encoding br"
    assert ids(vec.records()) == ["g", "d"]


def test_wrong_path_and_method(vec: VectorEmulator) -> None:
    """Only POST on the configured path is a batch (strict path)."""
    assert requests.post(vec.base_url + "/other", data=ndjson("a"), timeout=5).status_code == 404
    assert requests.get(vec.url, timeout=5).status_code == 405
    assert vec.records() == []


# -- poison, duplicates -----------------------------------------------------------------

def test_poison_record_rejects_the_whole_batch_so_the_shipper_splits(vec: VectorEmulator) -> None:
    """One record Vector cannot decode makes the batch 400 "Failed decoding body: ..."; the halves without it
    go through."""
    vec.poison("type", "poison")
    batch = ndjson("a", type="ok") + ndjson("p", type="poison") + ndjson("b", type="ok")
    reply = post(vec, batch)
    assert reply.status_code == 400
    assert reply.json()["message"].startswith("Failed decoding body: ")
    assert vec.records() == []
    lines = batch.splitlines(keepends=True)
    assert post(vec, lines[0]).status_code == 200
    assert post(vec, lines[1]).status_code == 400
    assert post(vec, lines[2]).status_code == 200
    assert ids(vec.records()) == ["a", "b"]
    assert vec.stats()["rejected_batches"] == 2
    vec.clear_poison()
    assert post(vec, lines[1]).status_code == 200


def test_undecodable_json_is_400_failed_decoding_body(vec: VectorEmulator) -> None:
    """http_server.rs build_events: a frame the codec refuses is 400 with "Failed decoding body: ..."; serde_json's
    recursion limit (128) is one such refusal."""
    bad = post(vec, ndjson("a") + b"{not json}\n")
    assert (bad.status_code, bad.json()["code"]) == (400, 400)
    assert bad.json()["message"].startswith("Failed decoding body: ")
    deep = b'{"event_id": "deep", "d": ' + b"[" * 130 + b"]" * 130 + b"}\n"
    assert post(vec, deep).json()["message"].startswith("Failed decoding body: ")
    assert post(vec, b'{"event_id": "ok", "d": ' + b"[" * 100 + b"]" * 100 + b"}\n").status_code == 200
    assert ids(vec.records()) == ["ok"]


def test_kafka_down_is_400_contents_failed_to_deliver_after_the_sink_timeout(vec: VectorEmulator) -> None:
    """handle_batch_status: Rejected (the kafka sink's delivery timed out) is 400 "Contents failed to deliver
    to sink", Errored is 500 "Error delivering contents to sink"; nothing is delivered either way."""
    vec.kafka_down(400)
    reply = post(vec, ndjson("a"))
    assert (reply.status_code, reply.json()) == (400, {"code": 400, "message": "Contents failed to deliver to sink"})
    vec.kafka_down(500)
    reply = post(vec, ndjson("b"))
    assert (reply.status_code, reply.json()) == (500, {"code": 500, "message": "Error delivering contents to sink"})
    # A body that does not decode is still refused for that, sink or no sink.
    assert post(vec, b"{not json}\n").json()["message"].startswith("Failed decoding body")
    vec.kafka_up()
    assert post(vec, ndjson("c")).status_code == 200
    assert ids(vec.records()) == ["c"] and vec.stats()["sink_failed_batches"] == 2


def test_kafka_down_answers_only_after_its_hold_or_when_it_comes_back(vec: VectorEmulator) -> None:
    """The answer waits for the sink's timeout (message_timeout_ms); Kafka coming back ends the wait with 200."""
    vec.kafka_down(400, hold_s=30.0)
    result: list[int] = []
    sender = threading.Thread(target=lambda: result.append(post(vec, ndjson("held"), timeout=20).status_code))
    sender.start()
    vec.wait_until(lambda: vec.stats()["holding"] or None, 5.0)
    assert result == []
    vec.kafka_up()
    sender.join(20)
    assert result == [200] and ids(vec.records()) == ["held"]


def test_a_body_over_the_limit_is_413_and_a_line_over_max_length_is_discarded() -> None:
    with VectorEmulator(path="/", max_body=1000) as vec:
        assert post(vec, ndjson("big", pad="x" * 2000)).status_code == 413
        assert vec.records() == []
    with VectorEmulator(path="/") as vec:
        long_line = ndjson("long", pad="x" * 70000)
        assert post(vec, ndjson("a") + long_line + ndjson("b")).status_code == 200
        assert ids(vec.records()) == ["a", "b"] and vec.stats()["discarded_frames"] == 1


def test_poison_matches_dotted_fields_and_exact_types() -> None:
    """The predicate walks nested objects and does not confuse 1 with true."""
    poison = Poison("data.code", (1,))
    assert poison.matches({"data": {"code": 1}})
    assert not poison.matches({"data": {"code": True}})
    assert not poison.matches({"data": "flat"})


def test_duplicates_are_counted_per_event_id(vec: VectorEmulator) -> None:
    """A resent batch shows as duplicate event_ids; events without one are counted apart."""
    post(vec, ndjson("a", "b"))
    post(vec, ndjson("b", "c"))
    post(vec, b'{"no_id": true}\n')
    stats = vec.stats()
    assert stats["duplicates"] == {"b": 2}
    assert stats["distinct_event_ids"] == 3
    assert stats["without_event_id"] == 1
    assert stats["records"] == 5


# -- failures ---------------------------------------------------------------------------

def test_fail_next_n_batches_then_accept(vec: VectorEmulator) -> None:
    """503 (with Retry-After) for the next 2 batches, nothing kept, then 200."""
    vec.fail_next(2, status=503, retry_after="1")
    first = post(vec, ndjson("a"))
    assert (first.status_code, first.headers["Retry-After"]) == (503, "1")
    assert post(vec, ndjson("a")).status_code == 503
    assert post(vec, ndjson("a")).status_code == 200
    assert ids(vec.records()) == ["a"]


def test_fail_randomly_is_reproducible_with_a_seed() -> None:
    """A probability rule fails some batches; the same seed fails the same ones."""
    def run() -> list[int]:
        with VectorEmulator(seed=11) as local:
            local.fail_randomly(0.4, status=429)
            return [requests.post(local.url, data=ndjson(str(i)), timeout=5).status_code
                    for i in range(30)]
    first = run()
    assert set(first) == {200, 429}
    assert run() == first


def test_lost_ack_delivers_but_answers_500(vec: VectorEmulator) -> None:
    """status_after: the batch is delivered yet answered 500; the resend duplicates it."""
    vec.lose_acks(1)
    assert post(vec, ndjson("a")).status_code == 500
    assert post(vec, ndjson("a")).status_code == 200
    assert vec.stats()["duplicates"] == {"a": 2}


def test_slow_answer_still_delivers(vec: VectorEmulator) -> None:
    """A delayed batch is delivered and answered 200 after the delay."""
    vec.slow(0.2, batches=1)
    assert post(vec, ndjson("s")).status_code == 200
    assert ids(vec.records()) == ["s"]


def test_hang_times_out_and_delivers_nothing(vec: VectorEmulator) -> None:
    """A hung request never answers: the client times out and nothing is recorded."""
    vec.hang(30, batches=1)
    with pytest.raises(requests.exceptions.ReadTimeout):
        post(vec, ndjson("h"), timeout=0.3)
    assert vec.records() == []
    assert post(vec, ndjson("h")).status_code == 200


def test_stopped_vector_refuses_connections(vec: VectorEmulator) -> None:
    """refuse(): connection refused on the same URL until accept()."""
    vec.refuse()
    with pytest.raises(requests.exceptions.ConnectionError):
        post(vec, ndjson("r"), timeout=2)
    vec.accept()
    assert post(vec, ndjson("r")).status_code == 200
    assert ids(vec.records()) == ["r"]


def test_wait_for_records_and_reset(vec: VectorEmulator) -> None:
    """wait_for_records returns once enough arrived; reset forgets records and faults."""
    post(vec, ndjson("a", "b"))
    assert ids(vec.wait_for_records(2, timeout=2)) == ["a", "b"]
    with pytest.raises(TimeoutError):
        vec.wait_for_records(3, timeout=0.1)
    vec.fail_next(5)
    vec.reset()
    assert vec.records() == [] and vec.faults() == []
    assert post(vec, ndjson("c")).status_code == 200


def test_request_log_shows_each_batch_outcome(vec: VectorEmulator) -> None:
    """The request log has every batch's status and the injected fault, as soon as each is answered.

    Read at once on purpose: the emulator logs a request before its answer goes out (it used to
    log after, and this read raced the second entry under load)."""
    vec.fail_next(1, status=500)
    post(vec, ndjson("a"))
    post(vec, ndjson("a"), **{"Content-Encoding": "gzip"})
    failed, bad = vec.requests("/events")
    assert (failed["status"], failed["fault"]) == (500, "status")
    assert (bad["status"], bad["headers"]["content-encoding"]) == (422, "gzip")


# -- as a subprocess --------------------------------------------------------------------

def test_subprocess_with_poison_from_the_command_line(tmp_path) -> None:
    """The CLI's poison options work, and the process stops by PID with exit status 0."""
    with vector_process(tmp_path, path="/events", poison_field="kind",
                        poison_values=("bad", 7)) as proc:
        assert requests.post(proc.url, data=ndjson("x", kind=7), timeout=5).status_code == 400
        assert requests.post(proc.url, data=ndjson("y", kind="ok"), timeout=5).status_code == 200
        assert ids(proc.records()) == ["y"]
        pid = proc.pid
        assert proc.stop() == 0
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_fixture_serves_on_root_path(vector_emu: VectorProcess) -> None:
    """The vector_emu fixture takes batches on '/'."""
    assert requests.post(vector_emu.url, data=ndjson("f"), timeout=5).status_code == 200
    assert ids(vector_emu.wait_for_records(1)) == ["f"]


# -- the operator's config --------------------------------------------------------------

def test_deploy_config_matches_what_the_emulator_assumes() -> None:
    """vector.toml: http_server (json over newline framing) -> dedupe by event_id -> kafka with acknowledgements."""
    config = tomllib.loads((REPO_ROOT / "deploy/vector/vector.toml").read_text())
    [(source_id, source)] = config["sources"].items()
    [sink] = config["sinks"].values()
    [(dedupe_id, dedupe)] = config["transforms"].items()
    assert dedupe["type"] == "dedupe" and dedupe["inputs"] == [source_id]
    assert dedupe["fields"] == {"match": ["event_id"]} and dedupe["cache"]["num_events"] >= 5000
    assert source["type"] == "http_server"
    assert source["decoding"] == {"codec": "json"}
    assert source["framing"]["method"] == "newline_delimited"
    assert source["strict_path"] is True and source["method"] == "POST"
    assert "encoding" not in source  # Vector refuses it next to framing/decoding
    assert sink["type"] == "kafka" and sink["inputs"] == [dedupe_id]
    assert sink["acknowledgements"] == {"enabled": True}
    assert sink["encoding"]["codec"] == "json"
    assert sink["bootstrap_servers"].startswith("${SCO_KAFKA_BOOTSTRAP")
    assert sink["topic"].startswith("${SCO_KAFKA_TOPIC")
    assert set(sink["batch"]) <= {"max_events", "max_bytes", "timeout_secs"}
    assert not {"batch.num.messages", "queue.buffering.max.ms"} & set(sink["librdkafka_options"])
    assert sink.get("buffer", {}).get("type", "memory") == "memory"
