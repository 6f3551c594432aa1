"""A hostile or broken API server on a pod watch (executor.kube.watch_stream via KubeApi.watch_pods).

A watch is one JSON object per line, ``{"type", "object"}`` (Kubernetes API concepts, "Efficient
detection of changes"). Whatever the server writes instead -- not JSON, JSON that is not an event,
a line past the bound, a line cut short -- the watch yields only well-formed events, and ends
either quietly (a cut line: resume from the last resourceVersion) or with one ``KubeError``
"WatchRefused" naming what it got, which the drain says (``drain.list_failed``) and retries.
Never another exception, never an event built from garbage.
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import ujson
from hypothesis import given
from hypothesis import strategies as st

from executor.kube.api import KubeApi, KubeError
from executor.kube.watch_stream import MAX_EVENT_BYTES
from tests.hostile.test_fuzz_http import RawServer
from tests.support.fuzzing import fuzz

NODE = "node-a"
GOOD = ujson.dumps({"type": "ADDED", "object": {"metadata": {"name": "p", "resourceVersion": "7"}}}).encode() + b"\n"


@pytest.fixture(scope="module")
def server() -> Iterator[RawServer]:
    srv = RawServer()
    yield srv
    srv.close()


def answer(body: bytes) -> bytes:
    """A 200 watch answer as the API server sends it: chunked, then the server ends it."""
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 4096]), body[i:i + 4096]) for i in range(0, len(body), 4096))
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunks + b"0\r\n\r\n")


def watch(server: RawServer, body: bytes) -> tuple[list[dict], KubeError | None]:
    server.reply = answer(body)
    api = KubeApi(server.url, NODE, timeout_s=2.0)
    got: list[dict] = []
    try:
        for event in api.watch_pods("1", 5):
            got.append(event)
    except KubeError as e:
        return got, e
    finally:
        api.close()
    return got, None


@pytest.mark.parametrize(("body", "refused"), [
    (b"<html>proxy error</html>\n", "not JSON"),
    (GOOD + b"{\"type\": \"ADDED\", \"object\": 5}\n", "not a watch event"),
    (GOOD + b"[1, 2]\n", "not a watch event"),
    (b"{" + b" " * (MAX_EVENT_BYTES + 10) + b"}\n", "a line over"),
])
def test_garbage_ends_the_watch_with_one_clear_error(server: RawServer, body: bytes, refused: str) -> None:
    got, error = watch(server, body)
    assert error is not None and error.reason == "WatchRefused" and refused in error.message
    assert all(e == ujson.loads(GOOD) for e in got)   # what came before the garbage, and only that


def test_a_line_cut_short_ends_the_watch_quietly(server: RawServer) -> None:
    got, error = watch(server, GOOD + GOOD[:20])
    assert error is None and got == [ujson.loads(GOOD)]


lines = st.one_of(
    st.just(GOOD),
    st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"") + b"\n"),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                 max_leaves=8).map(lambda v: ujson.dumps(v).encode() + b"\n"),
)


@fuzz(60)
@given(body=st.lists(lines, max_size=6).map(b"".join))
def test_any_body_yields_only_events_and_ends_in_a_known_way(server: RawServer, body: bytes) -> None:
    got, error = watch(server, body)
    for event in got:
        assert isinstance(event, dict) and isinstance(event.get("object"), dict)
    assert error is None or error.reason == "WatchRefused"
