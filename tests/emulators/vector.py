"""Emulator of Vector's ``http_server`` source with end-to-end acknowledgements on.

It answers the way deploy/vector/vector.toml makes real Vector answer (the body decoding is in
tests/emulators/vector_codec.py). Every
answer below names the Vector source it models (vectordotdev/vector):

- Routing, src/sources/util/http/prelude.rs: ``POST <path>`` exactly
  (``strict_path = true``: a longer path is 404 "Not found"; another method
  does not match the route, 405).
- Content-Encoding, src/sources/util/http/encoding.rs ``decode``: the header's
  encodings are undone right to left; ``identity``, ``gzip``, ``deflate``; a
  body that does not decompress is **422** "Failed decompressing payload with
  <enc> decoder."; any other encoding is **415** "Unsupported encoding <enc>"
  (``snappy``, which Vector does decode, is not emulated: the agent never sends it).
- Decoding, src/sources/http_server.rs ``build_events``: NDJSON framing, the
  json codec (a top-level array is one event per element); a frame that does
  not decode is **400** "Failed decoding body: <codec error>", nothing kept.
  serde_json's recursion limit (128) makes deeper nesting such an error; so
  does a record matching the ``poison`` predicate (a record Vector cannot
  decode, on purpose). A line over ``framing.newline_delimited.max_length`` is
  *discarded*, not refused (Vector's character-delimited framer skips it with
  a warning): counted in ``stats()["discarded_frames"]``, never delivered.
- ``handle_batch_status`` in src/sources/util/http/prelude.rs: **200** (empty
  body) once the batch is delivered; BatchStatus::Rejected is **400**
  "Contents failed to deliver to sink"; BatchStatus::Errored is **500** "Error
  delivering contents to sink". ``sink("reject")`` is Kafka down: the kafka
  sink's delivery times out after ``message_timeout_ms``, its service call
  errs, and lib/vector-core/src/stream/driver.rs ``handle_response`` marks the
  batch Rejected -- so the answer is that 400, after ``hold_s`` (the timeout),
  with nothing delivered. ``sink("error")`` answers the 500.
- **413** "Payload Too Large" past ``max_body`` bytes. The http_server source
  itself reads the whole body (``warp::body::bytes()``, no limit in prelude.rs);
  the limit is a proxy's in front of it (or a later Vector's), and so is the
  answer's plain-text body.
- Error bodies are Vector's ErrorMessage as JSON: ``{"code": ..., "message": ...}``
  (src/sources/util/http/error.rs; the route's ``recover`` replies with it).

Failures of the transport come from the shared fault rules (``_faults``):
status codes for the next N batches or with a probability, delays, hangs,
lost acknowledgements (``status_after``: delivered, yet answered 500 - the
duplicate maker), and ``down()`` for a stopped Vector (connection refused).
Records are counted per ``event_id`` so a test can see every duplicate.

Run: ``python -m tests.emulators.vector --port 0 --ready-file PATH [--path /events]``.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.emulators._app import BaseApp
from tests.emulators._control import BadCommand, Command, ControlClient
from tests.emulators._control import field as get
from tests.emulators._http import Request, Response, json_response
from tests.emulators._process import serve_main
from tests.emulators._server import EmulatorServer, InProcessEmulator
from tests.emulators.vector_codec import (
    DecodeError,
    DecompressError,
    UnsupportedEncoding,
    decode_batch,
    decode_content,
)

FRAMINGS = ("newline_delimited", "bytes")
SINK_MODES = ("ok", "reject", "error")
SINK_REJECTED = "Contents failed to deliver to sink"     # BatchStatus::Rejected -> 400
SINK_ERRORED = "Error delivering contents to sink"       # BatchStatus::Errored -> 500


@dataclass(frozen=True, slots=True)
class Poison:
    """Records whose ``field`` (dotted path) equals one of ``values`` do not decode."""

    field: str
    values: tuple[Any, ...]

    def matches(self, record: dict[str, Any]) -> bool:
        value: Any = record
        for part in self.field.split("."):
            if not isinstance(value, dict) or part not in value:
                return False
            value = value[part]
        return any(value == v and type(value) is type(v) for v in self.values)


@dataclass
class VectorState:
    records: list[dict[str, Any]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    without_event_id: int = 0
    delivered_batches: int = 0
    rejected_batches: int = 0      # refused for their content (4xx)
    sink_failed_batches: int = 0   # answered 400/500 by handle_batch_status
    discarded_frames: int = 0      # lines over max_length, skipped by the framer


def deliver(state: VectorState, events: list[dict[str, Any]]) -> None:
    """Record a batch, in order, counting each event_id (duplicates stay visible)."""
    state.records.extend(events)
    for event in events:
        event_id = event.get("event_id")
        if isinstance(event_id, str):
            state.counts[event_id] += 1
        else:
            state.without_event_id += 1
    state.delivered_batches += 1


def stats(state: VectorState) -> dict[str, Any]:
    return {
        "records": len(state.records),
        "distinct_event_ids": len(state.counts),
        "duplicates": {eid: n for eid, n in state.counts.items() if n > 1},
        "without_event_id": state.without_event_id,
        "delivered_batches": state.delivered_batches,
        "rejected_batches": state.rejected_batches,
        "sink_failed_batches": state.sink_failed_batches,
        "discarded_frames": state.discarded_frames,
    }


def _error(status: int, message: str) -> Response:
    return json_response(status, {"code": status, "message": message}, server="vector")


class VectorApp(BaseApp):
    """The http_server source: decode, hand to the sink, answer with the sink's batch status."""

    logged_headers = ("content-type", "content-encoding", "content-length", "user-agent")

    def __init__(self, path: str = "/", framing: str = "newline_delimited",
                 poison: Poison | None = None, max_body: int | None = None) -> None:
        if not path.startswith("/") or framing not in FRAMINGS:
            raise ValueError(f"path must start with '/', framing must be one of {FRAMINGS}")
        self.path = path
        self.framing = framing
        self.poison = poison
        self.max_body = max_body
        self.sink_mode = "ok"
        self.sink_hold_s = 0.0
        self.holding = 0                 # requests waiting on the sink right now
        self.state = VectorState()
        self._lock = threading.Lock()
        self._wake = threading.Event()   # a sink change ends the holds of requests waiting on Kafka

    def handle(self, request: Request) -> Response:
        if request.path != self.path:
            return _error(404, "Not found")
        if request.method != "POST":
            return _error(405, "HTTP method not allowed")
        if self.max_body is not None and len(request.body) > self.max_body:
            return Response(413, b"Payload Too Large", server="vector")
        try:
            body = decode_content(request.body, request.header("content-encoding"))
            with self._lock:
                events = decode_batch(body, self.framing, self.poison.matches if self.poison else None,
                                      self._discarded)
        except UnsupportedEncoding as exc:
            return _error(415, str(exc))
        except DecompressError as exc:
            return self._refused(422, str(exc))
        except DecodeError as exc:
            return self._refused(400, f"Failed decoding body: {exc}")
        mode, hold = self.sink_mode, self.sink_hold_s
        if mode != "ok" and hold > 0:
            self.holding += 1
            try:
                self._wake.wait(hold)     # the sink's timeout, unless the sink comes back first
            finally:
                self.holding -= 1
            mode = self.sink_mode
        with self._lock:
            if mode == "reject":
                self.state.sink_failed_batches += 1
                return _error(400, SINK_REJECTED)
            if mode == "error":
                self.state.sink_failed_batches += 1
                return _error(500, SINK_ERRORED)
            deliver(self.state, events)
        return Response(200, b"", server="vector")

    def _discarded(self) -> None:
        self.state.discarded_frames += 1

    def _refused(self, status: int, message: str) -> Response:
        with self._lock:
            self.state.rejected_batches += 1
        return _error(status, message)

    def commands(self) -> dict[str, Command]:
        return {"records": self._records, "stats": self._stats, "poison": self._poison, "sink": self._sink}

    def reset(self) -> None:
        with self._lock:
            self.state = VectorState()
            self.poison = None
        self._set_sink("ok", 0.0)

    def _records(self, body: dict[str, Any]) -> Any:
        start = get(body, "start", int, 0)
        with self._lock:
            return self.state.records[start:]

    def _stats(self, body: dict[str, Any]) -> Any:
        with self._lock:
            return {**stats(self.state), "holding": self.holding}

    def _poison(self, body: dict[str, Any]) -> Any:
        """``{"field": "type", "values": [...]}`` sets the predicate; ``{"clear": true}``."""
        if get(body, "clear", bool, False):
            self.poison = None
            return None
        values = get(body, "values", list)
        if not values:
            raise BadCommand("values must list at least one value")
        self.poison = Poison(get(body, "field", str), tuple(values))
        return {"field": self.poison.field, "values": list(self.poison.values)}

    def _sink(self, body: dict[str, Any]) -> Any:
        """``{"mode": "ok" | "reject" | "error", "hold_s": seconds each answer waits (the sink's timeout)}``."""
        mode = get(body, "mode", str)
        if mode not in SINK_MODES:
            raise BadCommand(f"mode must be one of {SINK_MODES}")
        hold = get(body, "hold_s", (int, float), 0.0)
        self._set_sink(mode, float(hold))
        return {"mode": mode, "hold_s": float(hold)}

    def _set_sink(self, mode: str, hold: float) -> None:
        self.sink_mode, self.sink_hold_s = mode, hold
        self._wake.set()
        self._wake = threading.Event()


class VectorControl(ControlClient):
    """Inspection and failure helpers, the same in-process and as a subprocess."""

    def reset(self) -> None:
        """No records, no poison, no faults, empty request log."""
        self.call("reset")

    def records(self, start: int = 0) -> list[dict[str, Any]]:
        return self.call("records", {"start": start})

    def stats(self) -> dict[str, Any]:
        return self.call("stats")

    def wait_for_records(self, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Poll until at least ``count`` records were delivered; those records."""
        def enough() -> list[dict[str, Any]] | None:
            records = self.records()
            return records if len(records) >= count else None

        return self.wait_until(enough, timeout)

    def fail_next(self, batches: int, status: int = 503, retry_after: str | None = None) -> int:
        return self.fault("status", count=batches, status=status, retry_after=retry_after)

    def fail_randomly(self, probability: float, status: int = 500) -> int:
        return self.fault("status", probability=probability, status=status)

    def slow(self, seconds: float, batches: int | None = None) -> int:
        """Deliver and answer, but only after ``seconds``."""
        return self.fault("delay", seconds=seconds, count=batches)

    def hang(self, seconds: float, batches: int | None = None) -> int:
        """Hold the request ``seconds``, then drop the connection; nothing delivered."""
        return self.fault("hang", seconds=seconds, count=batches)

    def lose_acks(self, batches: int, status: int = 500) -> int:
        """Deliver the batch, then answer ``status``: the shipper will resend (duplicates)."""
        return self.fault("status_after", count=batches, status=status)

    def refuse(self) -> None:
        """Vector stopped: connections to the service port are refused."""
        self.down("refuse")

    def accept(self) -> None:
        self.up()

    def poison(self, field_name: str, *values: Any) -> None:
        self.call("poison", {"field": field_name, "values": list(values)})

    def clear_poison(self) -> None:
        self.call("poison", {"clear": True})

    def kafka_down(self, status: int = 400, hold_s: float = 0.0) -> None:
        """The sink fails every batch: 400 (delivery timed out: Rejected) or 500 (Errored),
        each answer after ``hold_s`` (the kafka sink's message_timeout_ms)."""
        self.call("sink", {"mode": {400: "reject", 500: "error"}[status], "hold_s": hold_s})

    def kafka_up(self) -> None:
        self.call("sink", {"mode": "ok"})


class VectorEmulator(VectorControl, InProcessEmulator):
    """In-process: ``with VectorEmulator(path="/events") as vec: post to vec.url``."""

    def __init__(self, path: str = "/", framing: str = "newline_delimited",
                 poison: Poison | None = None, host: str = "127.0.0.1", port: int = 0,
                 seed: int | None = None, max_body: int | None = None) -> None:
        self.app = VectorApp(path, framing, poison, max_body)
        self.server = EmulatorServer(self.app, host, port, seed)
        super().__init__(self.server.control_url)
        self.base_url = self.server.url
        self.url = self.base_url + path


def main(argv: Sequence[str] | None = None) -> int:
    return serve_main(argv, "python -m tests.emulators.vector", _add_arguments, _build)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", default="/", help="the http_server source's path")
    parser.add_argument("--framing", default="newline_delimited", choices=FRAMINGS)
    parser.add_argument("--poison-field", help="reject batches holding a record with ...")
    parser.add_argument("--poison-value", action="append", default=[],
                        help="... this value (JSON; repeatable)")
    parser.add_argument("--max-body", type=int, help="answer 413 past this many bytes (a proxy's limit)")


def _build(args: argparse.Namespace) -> VectorApp:
    poison = None
    if args.poison_field:
        if not args.poison_value:
            raise ValueError("--poison-field needs at least one --poison-value")
        poison = Poison(args.poison_field, tuple(_json_or_text(v) for v in args.poison_value))
    return VectorApp(args.path, args.framing, poison, args.max_body)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


if __name__ == "__main__":
    sys.exit(main())
