"""Emulator of Vector's ``http_server`` source with end-to-end acknowledgements on.

It answers the way deploy/vector/vector.toml makes real Vector answer:

- ``POST <path>`` (exact path, like ``strict_path = true``; other paths 404,
  other methods 405) with NDJSON: each non-blank line is one JSON value, and a
  top-level array becomes one event per element (Vector's ``json`` codec), so a
  one-line JSON array works too. Anything but JSON objects -> 400, nothing kept.
  ``Content-Encoding`` gzip/deflate is decoded; another encoding -> 415.
- 200 (empty body) only once the batch is "delivered": its records are
  appended, in order, before the answer is written. A batch with a record
  matching the poison predicate is refused whole with 400 - what Vector answers
  when the sink rejects the batch ("Contents failed to deliver to sink") - so a
  shipper has to split it to find the bad record.
- Error bodies are Vector's ``{"code": ..., "message": ...}``.

Failures come from the shared fault rules (``_faults``): 500/503/429 for the
next N batches or with a probability, delays, hangs, lost acknowledgements
(``status_after``: delivered, yet answered 500 - the duplicate maker), and
``down()`` for a stopped Vector (connection refused).
Records are counted per ``event_id`` so a test can see every duplicate.

Run: ``python -m tests.emulators.vector --port 0 --ready-file PATH [--path /events]``.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import zlib
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

FRAMINGS = ("newline_delimited", "bytes")
MAX_DECODED = 64 * 1024 * 1024  # a compressed body may not expand past this


class DecodeError(ValueError):
    """The body is not a batch of JSON objects (answered 400)."""


class UnsupportedEncoding(ValueError):
    """A Content-Encoding Vector would not decode here (answered 415)."""


@dataclass(frozen=True, slots=True)
class Poison:
    """Records whose ``field`` (dotted path) equals one of ``values`` are rejected."""

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
    rejected_batches: int = 0


def decode_content(body: bytes, encoding: str | None) -> bytes:
    encoding = (encoding or "identity").strip().lower()
    try:
        if encoding in ("identity", "none", ""):
            return body
        if encoding == "gzip":
            return _bounded(zlib.decompressobj(16 + zlib.MAX_WBITS), body)
        if encoding == "deflate":
            return _bounded(zlib.decompressobj(), body)
    except zlib.error as exc:
        raise DecodeError(f"Failed decompressing payload with {encoding} decoder: {exc}") from None
    raise UnsupportedEncoding(f"Unsupported encoding {encoding}")


def _bounded(decompressor: Any, body: bytes) -> bytes:
    out = decompressor.decompress(body, MAX_DECODED)
    if decompressor.unconsumed_tail:
        raise DecodeError(f"decoded body larger than {MAX_DECODED} bytes")
    if not decompressor.eof:
        raise DecodeError("compressed body is truncated")
    return out


def decode_batch(body: bytes, framing: str = "newline_delimited") -> list[dict[str, Any]]:
    """The events of one request body, the way Vector's json codec frames them."""
    frames = [line for line in body.split(b"\n") if line.strip()] \
        if framing == "newline_delimited" else ([body] if body.strip() else [])
    events: list[dict[str, Any]] = []
    for number, frame in enumerate(frames, 1):
        try:
            value = json.loads(frame)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DecodeError(f"Failed decoding body (frame {number}): {exc}") from None
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict):
                raise DecodeError(f"frame {number}: Attempted to convert non-Object JSON "
                                  "into an Event")
            events.append(item)
    return events


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
    }


def _error(status: int, message: str) -> Response:
    return json_response(status, {"code": status, "message": message}, server="vector")


class VectorApp(BaseApp):
    """The http_server source: decode, check poison, deliver, then answer."""

    logged_headers = ("content-type", "content-encoding", "content-length", "user-agent")

    def __init__(self, path: str = "/", framing: str = "newline_delimited",
                 poison: Poison | None = None) -> None:
        if not path.startswith("/") or framing not in FRAMINGS:
            raise ValueError(f"path must start with '/', framing must be one of {FRAMINGS}")
        self.path = path
        self.framing = framing
        self.poison = poison
        self.state = VectorState()
        self._lock = threading.Lock()

    def handle(self, request: Request) -> Response:
        if request.path != self.path:
            return _error(404, "Not found")
        if request.method != "POST":
            return _error(405, "Method not allowed")
        try:
            body = decode_content(request.body, request.header("content-encoding"))
            events = decode_batch(body, self.framing)
        except UnsupportedEncoding as exc:
            return _error(415, str(exc))
        except DecodeError as exc:
            return _error(400, str(exc))
        with self._lock:
            bad = [i for i, e in enumerate(events) if self.poison and self.poison.matches(e)]
            if bad:
                self.state.rejected_batches += 1
                return _error(400, f"Contents failed to deliver to sink (records {bad})")
            deliver(self.state, events)
        return Response(200, b"", server="vector")

    def commands(self) -> dict[str, Command]:
        return {"records": self._records, "stats": self._stats, "poison": self._poison}

    def reset(self) -> None:
        with self._lock:
            self.state = VectorState()
            self.poison = None

    def _records(self, body: dict[str, Any]) -> Any:
        start = get(body, "start", int, 0)
        with self._lock:
            return self.state.records[start:]

    def _stats(self, body: dict[str, Any]) -> Any:
        with self._lock:
            return stats(self.state)

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


class VectorEmulator(VectorControl, InProcessEmulator):
    """In-process: ``with VectorEmulator(path="/events") as vec: post to vec.url``."""

    def __init__(self, path: str = "/", framing: str = "newline_delimited",
                 poison: Poison | None = None, host: str = "127.0.0.1", port: int = 0,
                 seed: int | None = None) -> None:
        self.app = VectorApp(path, framing, poison)
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


def _build(args: argparse.Namespace) -> VectorApp:
    poison = None
    if args.poison_field:
        if not args.poison_value:
            raise ValueError("--poison-field needs at least one --poison-value")
        poison = Poison(args.poison_field, tuple(_json_or_text(v) for v in args.poison_value))
    return VectorApp(args.path, args.framing, poison)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


if __name__ == "__main__":
    sys.exit(main())
