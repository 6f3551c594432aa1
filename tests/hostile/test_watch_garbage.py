"""A hostile or broken API server on a pod watch (executor.kube.http_feed, as the drain's loop feeds it).

A watch is one JSON object per line, ``{"type", "object"}`` (Kubernetes API concepts, "Efficient
detection of changes"). Whatever the server writes instead -- not JSON, JSON that is not an event,
a line past the bound, a line cut short -- the watch yields only well-formed events, and ends
either quietly (a cut line: resume from the last resourceVersion) or refused, naming what it got
(the drain's loop raises it as one ``KubeError`` "WatchRefused", which the drain says,
``drain.list_failed``, and retries). Never another exception, never an event built from garbage,
however the bytes are cut into reads.
"""
from __future__ import annotations

import pytest
import ujson
from hypothesis import given
from hypothesis import strategies as st

from executor.kube.http_feed import MAX_EVENT_BYTES, ResponseFeed
from tests.support.fuzzing import fuzz

NODE = "node-a"
GOOD = ujson.dumps({"type": "ADDED", "object": {"metadata": {"name": "p", "resourceVersion": "7"}}}).encode() + b"\n"


def answer(body: bytes) -> bytes:
    """A 200 watch answer as the API server sends it: chunked, then the server ends it."""
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 4096]), body[i:i + 4096]) for i in range(0, len(body), 4096))
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunks + b"0\r\n\r\n")


def watch(body: bytes, cut: int = 1 << 30, *, ended: bool = True) -> tuple[list[dict], str]:
    """The events and the refusal of a watch answer fed ``cut`` bytes at a time (as reads come)."""
    data = answer(body) if ended else answer(body)[:-5]
    feed = ResponseFeed(stream=True)
    got: list[dict] = []
    for i in range(0, len(data), cut):
        feed.feed(data[i:i + cut])
        got += feed.take_events()
    feed.closed()
    assert feed.status == 200 and (feed.complete or feed.refused or not ended)
    return got, feed.refused


@pytest.mark.parametrize(("body", "refused"), [
    (b"<html>proxy error</html>\n", "not JSON"),
    (GOOD + b"{\"type\": \"ADDED\", \"object\": 5}\n", "not a watch event"),
    (GOOD + b"[1, 2]\n", "not a watch event"),
    (b"{" + b" " * (MAX_EVENT_BYTES + 10) + b"}\n", "a line over"),
])
def test_garbage_ends_the_watch_with_one_clear_error(body: bytes, refused: str) -> None:
    got, error = watch(body)
    assert refused in error
    assert all(e == ujson.loads(GOOD) for e in got)   # what came before the garbage, and only that


def test_a_line_cut_short_ends_the_watch_quietly() -> None:
    got, error = watch(GOOD + GOOD[:20], ended=False)
    assert error == "" and got == [ujson.loads(GOOD)]


lines = st.one_of(
    st.just(GOOD),
    st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"") + b"\n"),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                 max_leaves=8).map(lambda v: ujson.dumps(v).encode() + b"\n"),
)


@fuzz(60)
@given(body=st.lists(lines, max_size=6).map(b"".join), cut=st.integers(1, 300))
def test_any_body_yields_only_events_and_ends_in_a_known_way(body: bytes, cut: int) -> None:
    got, error = watch(body, cut)
    for event in got:
        assert isinstance(event, dict) and isinstance(event.get("object"), dict)
    assert got == watch(body)[0] and error == watch(body)[1]   # however the reads cut the bytes
