"""Shared settings and strategies for the property-based fuzz tests of every parser.

Every fuzz property uses ``fuzz(n)``: a fixed seed (``derandomize``), so CI runs
the same examples every time and a failure reproduces; no example database, so
a run leaves nothing behind. ``bench/fuzz.py`` sets ``SCO_FUZZ_SCALE`` to run
each property with many more examples (still derandomized: a long run that
finds something can be repeated exactly). The inventory of fuzzed parsers is
in docs/reliability.md. ``Feed`` stands in for a ZeroMQ socket, so a receiver's
real handler can be fed any frames.
"""
from __future__ import annotations

import copy
import os
from typing import Any

import ujson
import zmq
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SCALE_ENV = "SCO_FUZZ_SCALE"


def scale() -> float:
    try:
        return max(0.01, float(os.environ.get(SCALE_ENV, "1")))
    except ValueError:
        return 1.0


def fuzz(examples: int, **options: object) -> settings:
    """Hypothesis settings for a fuzz property: ``examples`` in CI, times SCO_FUZZ_SCALE in the bench."""
    chosen: dict[str, object] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
    chosen.update(options)
    return settings(max_examples=max(1, round(examples * scale())), derandomize=True, database=None,
                    **chosen)  # type: ignore[arg-type]


json_scalars = st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | \
    st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=12)


# RFC 3339 texts from their parts, so every year, day and offset is reachable -- the edges of
# the calendar included (hypothesis tries the ends of each range early).
rfc3339_texts = st.builds(
    lambda y, mo, d, h, mi, s, frac, off: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}{off}",
    st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32), st.integers(0, 24), st.integers(0, 60),
    st.integers(0, 61), st.sampled_from(["", ".5", ".999999999"]),
    st.just("Z") | st.builds(lambda sign, hh, mm: f"{sign}{hh:02d}:{mm:02d}", st.sampled_from("+-"),
                             st.integers(0, 24), st.integers(0, 60)))
gmt_texts = st.builds(
    lambda wd, d, mo, y, h, mi, s: f"{wd}{d} {mo} {y:04d} {h:02d}:{mi:02d}:{s:02d} GMT",
    st.sampled_from(["", "Mon, ", "Sun, "]), st.integers(0, 32),
    st.sampled_from(["Jan", "Feb", "Dec", "Foo"]), st.integers(0, 9999), st.integers(0, 24), st.integers(0, 60),
    st.integers(0, 61))
times = rfc3339_texts | gmt_texts | st.text(max_size=30)


def json_bytes(values: st.SearchStrategy = json_values) -> st.SearchStrategy[bytes]:
    return values.map(lambda v: ujson.dumps(v).encode())


def near(keys: list[str], values: st.SearchStrategy = json_values) -> st.SearchStrategy[dict]:
    """Objects built from the real keys with any values: what gets past a shallow check."""
    return st.dictionaries(st.sampled_from(keys), values, max_size=len(keys) + 1)


def any_bytes(keys: list[str], max_size: int = 600) -> st.SearchStrategy[bytes]:
    """Raw bytes, any JSON, and near-miss JSON objects built from ``keys``."""
    return st.binary(max_size=max_size) | json_bytes() | json_bytes(near(keys))


_DELETE = object()


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


def _apply(doc: Any, changes: list[tuple[tuple, Any]]) -> Any:
    out = copy.deepcopy(doc)
    for path, value in changes:
        parent = out
        try:
            for key in path[:-1]:
                parent = parent[key]
            if value is _DELETE:
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue   # an earlier change already replaced part of the path
    return out


def mutated(doc: Any, values: st.SearchStrategy = json_values, max_changes: int = 3) -> st.SearchStrategy:
    """A real document (a state file, a message) with one to ``max_changes`` values anywhere in it
    replaced or deleted: what a corrupt file or a buggy peer really looks like."""
    paths = _paths(doc)
    change = st.tuples(st.sampled_from(paths), values | st.just(_DELETE))
    return st.lists(change, min_size=1, max_size=max_changes).map(lambda changes: _apply(doc, changes))


class Feed:
    """A stand-in for a SUB/DEALER socket: hands out the queued messages, then zmq.Again."""

    def __init__(self, messages: list[list[bytes]]) -> None:
        self.messages = list(messages)
        self.sent: list[list[bytes]] = []

    def send_multipart(self, frames: list[bytes], flags: int = 0) -> None:
        self.sent.append(frames)

    def recv_multipart(self, flags: int = 0) -> list[bytes]:
        if not self.messages:
            raise zmq.Again()
        return self.messages.pop(0)
