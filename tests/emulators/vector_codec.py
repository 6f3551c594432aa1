"""How Vector's http_server source turns a request body into events, for the Vector emulator.

- ``decode_content``: src/sources/util/http/encoding.rs ``decode`` -- the
  Content-Encoding list undone right to left; a body that does not decompress
  is 422 "Failed decompressing payload with <enc> decoder.", an encoding it
  does not know 415 "Unsupported encoding <enc>".
- ``decode_batch``: src/sources/http_server.rs ``build_events`` with
  newline_delimited framing and the json codec: a frame that does not decode
  is 400 "Failed decoding body: <error>" for the whole request; a top-level
  array is one event per element; serde_json refuses nesting past 128; a line
  over ``max_length`` is discarded by the framer, not refused.
"""
from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

MAX_DECODED = 64 * 1024 * 1024  # a compressed body may not expand past this
MAX_LENGTH = 65536              # deploy/vector: framing.newline_delimited.max_length
RECURSION_LIMIT = 128           # serde_json's default


class DecodeError(ValueError):
    """The body is not a batch of JSON objects (400 "Failed decoding body: ...")."""


class DecompressError(ValueError):
    """The body does not decompress with its Content-Encoding (422)."""


class UnsupportedEncoding(ValueError):
    """A Content-Encoding Vector would not decode (415)."""


def decode_content(body: bytes, encoding: str | None) -> bytes:
    """Undo the Content-Encoding list right to left, as encoding.rs ``decode`` does."""
    for enc in reversed([e.strip() for e in (encoding or "").split(",")]):
        if enc in ("", "identity"):
            continue
        if enc not in ("gzip", "deflate"):
            raise UnsupportedEncoding(f"Unsupported encoding {enc}")
        try:
            body = _bounded(zlib.decompressobj(16 + zlib.MAX_WBITS if enc == "gzip" else zlib.MAX_WBITS), body)
        except (zlib.error, DecompressError):
            raise DecompressError(f"Failed decompressing payload with {enc} decoder.") from None
    return body


def _bounded(decompressor: Any, body: bytes) -> bytes:
    out: bytes = decompressor.decompress(body, MAX_DECODED)
    if decompressor.unconsumed_tail or not decompressor.eof:
        raise DecompressError("truncated or too large")
    return out


def depth(value: Any) -> int:
    """Nesting depth of a JSON value (serde_json counts arrays and objects)."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def split_frames(body: bytes, framing: str, on_discard: Callable[[], None] | None = None,
                 max_length: int = MAX_LENGTH) -> list[bytes]:
    """The frames of a body; newline framing skips over-long lines (counted), as Vector's framer does."""
    if framing != "newline_delimited":
        return [body] if body.strip() else []
    frames = []
    for line in body.split(b"\n"):
        if len(line) > max_length:
            if on_discard is not None:
                on_discard()
            continue
        if line.strip():
            frames.append(line)
    return frames


def decode_batch(body: bytes, framing: str = "newline_delimited",
                 poison: Callable[[dict[str, Any]], bool] | None = None,
                 on_discard: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """The events of one request body, the way Vector's json codec frames them; DecodeError else."""
    events: list[dict[str, Any]] = []
    for number, frame in enumerate(split_frames(body, framing, on_discard), 1):
        try:
            value = json.loads(frame)
        except RecursionError:
            raise DecodeError(f"Error parsing JSON: recursion limit exceeded (frame {number})") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise DecodeError(f"Error parsing JSON: {exc} (frame {number})") from None
        if depth(value) > RECURSION_LIMIT:
            raise DecodeError(f"Error parsing JSON: recursion limit exceeded (frame {number})")
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict):
                raise DecodeError(f"Error parsing JSON: Attempted to convert non-Object JSON "
                                  f"into an Event (frame {number})")
            if poison is not None and poison(item):
                raise DecodeError(f"Error parsing JSON: the poison record (frame {number})")
            events.append(item)
    return events


