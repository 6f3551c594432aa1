"""watcher.contract_fetch: conditional GET against a local server, and folding results into state."""
from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from common.contract import Contract
from tests.support.contract_bundles import SCOPE, BundleServer, Key, payload, respond
from watcher.contract_fetch import (
    FetchResult,
    RefreshState,
    apply_fetch,
    check_url,
    fetch,
    next_fetch_at,
    status_error,
)
from watcher.contract_verify import REASONS, Accepted, Rejected

Start = Callable[..., BundleServer]


def test_200_returns_body_and_etag(bundle_server: Start, key: Key) -> None:
    bundle = key.bundle(payload(6))
    srv = bundle_server(respond(200, bundle, {"ETag": '"v6"'}))
    assert fetch(srv.url, None) == FetchResult(200, '"v6"', bundle)
    assert "If-None-Match" not in srv.requests[0]


def test_conditional_get_sends_etag_and_handles_304(bundle_server: Start) -> None:
    srv = bundle_server(respond(304))
    assert fetch(srv.url, '"v6"') == FetchResult(304, '"v6"')
    assert srv.requests[0]["If-None-Match"] == '"v6"'


def test_content_length_over_limit_is_refused_unread(bundle_server: Start) -> None:
    srv = bundle_server(respond(200, b"x" * 2000))
    assert fetch(srv.url, None, limit=1000).error == "too_large"


def test_unbounded_body_stops_at_limit(bundle_server: Start) -> None:
    """No Content-Length (read until close): reading stops one byte past the limit."""
    def reply(handler) -> None:
        handler.send_response(200)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(b"y" * 5000)
    srv = bundle_server(reply)
    assert fetch(srv.url, None, limit=1000).error == "too_large"


def test_body_shorter_than_content_length_is_truncated(bundle_server: Start) -> None:
    def reply(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "500")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(b"{" * 100)
        handler.close_connection = True
    srv = bundle_server(reply)
    assert fetch(srv.url, None).error == "truncated"


@pytest.mark.parametrize(("status", "code"), [
    (404, "fetch_error:404"), (403, "fetch_error:4xx"), (500, "fetch_error:500"),
    (503, "fetch_error:5xx"), (302, "fetch_error:status"),
])
def test_http_errors(bundle_server: Start, status: int, code: str) -> None:
    srv = bundle_server(respond(status, b"nope"))
    result = fetch(srv.url, '"v5"')
    assert (result.status, result.etag, result.body, result.error) == (status, '"v5"', None, code)
    assert result.detail.startswith(f"HTTP {status}")


def test_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on a port just released by bind-without-listen.
    assert fetch(f"http://127.0.0.1:{port}/c.json", None, timeout_s=2).error == "fetch_error:refused"


def test_timeout_when_server_never_answers() -> None:
    """A listener that never accepts: connect completes in the backlog, the reply never comes."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        url = f"http://127.0.0.1:{s.getsockname()[1]}/c.json"
        assert fetch(url, None, timeout_s=0.3).error == "fetch_error:timeout"


def test_bad_url_is_an_error_not_a_crash() -> None:
    assert fetch("ftp://x/y", None).error == "fetch_error:protocol"
    with pytest.raises(ValueError, match="http"):
        check_url("ftp://x/y")
    assert check_url("https://h:8443/a/b?c=1") == ("https", "h", 8443, "/a/b?c=1")


def test_status_error_codes_are_bounded() -> None:
    codes = {status_error(s) for s in range(100, 700)}
    assert codes <= REASONS and len(codes) == 5


def test_next_fetch_at_stays_within_jitter() -> None:
    assert next_fetch_at(1000.0, 60.0, 10.0, lambda: 0.0) == 1050.0
    assert next_fetch_at(1000.0, 60.0, 10.0, lambda: 0.5) == 1060.0
    assert next_fetch_at(1000.0, 60.0, 10.0, lambda: 0.999) == pytest.approx(1069.98)
    assert next_fetch_at(1000.0, 2.0, 10.0, lambda: 0.0) == 1001.0  # never sooner than 1 s


# --- apply_fetch: every fetch failure leaves the contract as it was -------------------------


@pytest.mark.parametrize(("reply", "code"), [
    (respond(404), "fetch_error:404"),
    (respond(500), "fetch_error:500"),
])
def test_fetch_errors_keep_the_contract(bundle_server: Start, current: Contract, reply, code: str) -> None:
    state = RefreshState(current, '"v5"')
    new, outcome = apply_fetch(state, fetch(bundle_server(reply).url, state.etag), SCOPE, {})
    assert new.contract is current and new.etag == '"v5"' and new.failing == code
    assert isinstance(outcome, Rejected) and outcome.reason == code


def test_network_errors_keep_the_contract(current: Contract) -> None:
    state = RefreshState(current, None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = fetch(f"http://127.0.0.1:{port}/", None, timeout_s=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        timed_out = fetch(f"http://127.0.0.1:{s.getsockname()[1]}/", None, timeout_s=0.3)
    for result, code in ((refused, "fetch_error:refused"), (timed_out, "fetch_error:timeout")):
        new, outcome = apply_fetch(state, result, SCOPE, {})
        assert new.contract is current and new.failing == code
        assert isinstance(outcome, Rejected) and outcome.reason == code and outcome.detail


def test_refresh_cycle(bundle_server: Start, key: Key, trusted: dict[str, bytes], current: Contract) -> None:
    """New bundle adopted with its ETag; then 304 is nothing; a bad bundle is refused and kept quiet."""
    replies = [respond(200, key.bundle(payload(6)), {"ETag": '"v6"'}), respond(304),
               respond(200, key.bundle(payload(4)), {"ETag": '"v4"'})]
    srv = bundle_server(lambda handler: replies.pop(0)(handler))  # noqa: PLW0108 -- pops per request, not once
    state = RefreshState(current)
    state, outcome = apply_fetch(state, fetch(srv.url, state.etag), SCOPE, trusted)
    assert isinstance(outcome, Accepted) and outcome.changed
    assert state.contract.serial == 6 and state.etag == '"v6"'
    state, outcome = apply_fetch(state, fetch(srv.url, state.etag), SCOPE, trusted)
    assert outcome is None and state.contract.serial == 6
    state, outcome = apply_fetch(state, fetch(srv.url, state.etag), SCOPE, trusted)
    assert isinstance(outcome, Rejected) and outcome.reason == "lower_serial"
    assert state.contract.serial == 6 and state.etag == '"v4"' and state.failing == "lower_serial"
    assert [r.get("If-None-Match") for r in srv.requests] == [None, '"v6"', '"v6"']


def test_oversized_and_truncated_bodies_keep_the_contract(current: Contract) -> None:
    state = RefreshState(current)
    for code in ("too_large", "truncated"):
        new, outcome = apply_fetch(state, FetchResult(200, None, error=code), SCOPE, {})
        assert new.contract is current and isinstance(outcome, Rejected) and outcome.reason == code


def test_trickling_server_hits_the_overall_deadline(bundle_server: Start) -> None:
    """One byte every 50 ms never trips a per-read timeout; the whole-exchange deadline ends it."""
    import threading
    import time

    hung_up = threading.Event()

    def reply(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        try:
            for _ in range(200):  # 10 s unless the client hangs up first
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(0.05)
        except OSError:
            hung_up.set()
    srv = bundle_server(reply)
    assert fetch(srv.url, None, timeout_s=0.4).error == "fetch_error:timeout"
    assert hung_up.wait(5), "the client kept reading past its deadline"


def test_failing_is_cleared_by_the_next_good_refresh(current: Contract) -> None:
    """``failing`` lets the watcher report a lasting outage once, and its end."""
    state, _ = apply_fetch(RefreshState(current), FetchResult(0, None, error="fetch_error:refused"), SCOPE, {})
    assert state.failing == "fetch_error:refused"
    state, outcome = apply_fetch(state, FetchResult(304, None), SCOPE, {})
    assert outcome is None and state.failing is None and state.contract is current
