"""The drain's HTTP/1.1 response parser (executor.kube.http_feed), fed as reads come: RFC 9112 framing
(Content-Length, chunked, until close), an answer's body, a watch's events, and what it refuses."""
from __future__ import annotations

import pytest
import ujson

from executor.kube.http_feed import FeedError, ResponseFeed

STATUS = ujson.dumps({"kind": "Status", "code": 429, "reason": "TooManyRequests",
                      "details": {"causes": [{"reason": "DisruptionBudget"}]}}).encode()


def fed(data: bytes, cut: int, **kw: object) -> ResponseFeed:
    feed = ResponseFeed(**kw)   # type: ignore[arg-type]
    for i in range(0, len(data), cut):
        feed.feed(data[i:i + cut])
    return feed


@pytest.mark.parametrize("cut", [1, 2, 7, 64, 1 << 20])
def test_an_answer_with_a_content_length_is_whole_however_it_is_cut(cut):
    data = (b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 10\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(STATUS), STATUS))
    feed = fed(data, cut)
    assert feed.complete and feed.keep_alive and feed.status == 429
    assert feed.headers["retry-after"] == "10" and bytes(feed.body) == STATUS


@pytest.mark.parametrize("cut", [1, 3, 1 << 20])
def test_a_chunked_answer_with_extensions_and_trailers(cut):
    data = (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: y\r\n\r\n")
    feed = fed(data, cut)
    assert feed.complete and feed.status == 201 and bytes(feed.body) == b"hello world"


def test_a_body_until_close_ends_with_the_connection_and_is_not_kept():
    feed = fed(b"HTTP/1.1 200 OK\r\n\r\n{}", 4)
    assert not feed.complete
    feed.closed()
    assert feed.complete and not feed.keep_alive and bytes(feed.body) == b"{}"


def test_connection_close_is_not_kept_alive():
    feed = fed(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 100)
    assert feed.complete and not feed.keep_alive


def test_a_watch_answer_that_is_an_error_is_collected_not_streamed():
    data = b"HTTP/1.1 410 Gone\r\nContent-Length: %d\r\n\r\n%s" % (len(STATUS), STATUS)
    feed = fed(data, 5, stream=True)
    assert feed.complete and feed.status == 410 and not feed.events_follow and bytes(feed.body) == STATUS


@pytest.mark.parametrize(("data", "why"), [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "header field"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", "longer than its size"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n", "99999999"),
])
def test_what_is_not_http_is_refused_with_a_reason(data, why):
    with pytest.raises(FeedError, match=why):
        fed(data, 1 << 20, max_body=1 << 20)


def test_a_head_that_never_ends_is_refused_past_its_bound():
    with pytest.raises(FeedError, match="head over"):
        fed(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 20000, 4096)


def test_a_connection_closed_inside_an_answer_is_an_error_not_an_answer():
    feed = fed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", 100)
    with pytest.raises(FeedError, match="inside the response body"):
        feed.closed()
