"""Fetching the contract bundle: one conditional GET, and when to do the next.

The bundle is signed, so the transport adds no trust; it only has to be
cheap and bounded. A 304 (ETag unchanged) costs no parsing and no signature
check, which is what most of the 60 s refreshes are. Every failure becomes an
error code from ``contract_verify.REASONS``; nothing here raises for a
network or server fault.
"""
from __future__ import annotations

import functools
import http.client
import socket
import ssl  # already loaded by http.client; named for the type
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from common.contract import Contract
from watcher.contract_verify import (
    MAX_ENVELOPE_BYTES,
    Accepted,
    NodeScope,
    Rejected,
    decide,
)
from watcher.ed25519_check import SignatureCheck, check_here

REFRESH_INTERVAL_S = 60.0
REFRESH_JITTER_S = 10.0  # spreads a hall's nodes so a fleet rollout does not fetch in lockstep
FETCH_TIMEOUT_S = 5.0
_CHUNK = 16384


@dataclass(frozen=True, slots=True)
class FetchResult:
    """200 with ``body``; 304 with no body; or ``error`` (a REASONS code) and status 0 or the HTTP status."""

    status: int
    etag: str | None
    body: bytes | None = None
    error: str | None = None
    detail: str = ""  # for humans, with ``error``


@dataclass(frozen=True, slots=True)
class RefreshState:
    """The watcher's contract, the ETag of the last bundle it judged, and why the last refresh failed."""

    contract: Contract
    etag: str | None = None
    failing: str | None = None  # reason of the last refresh if it was refused; None once one succeeds


def apply_fetch(
    state: RefreshState,
    result: FetchResult,
    scope: NodeScope,
    trusted_keys: Mapping[str, bytes],
    check: SignatureCheck = check_here,
) -> tuple[RefreshState, Accepted | Rejected | None]:
    """Fold one fetch into the state; the outcome (None: nothing new) says what to report.

    On ``Accepted`` with ``changed`` the caller persists ``outcome.envelope`` as
    the LKG and publishes the contract. A refused bundle keeps its ETag, so an
    unchanged bad bundle comes back as 304 and is reported once, not every
    minute; whoever reloads the trusted keys should reset ``etag`` to None so
    the same bundle is judged again under the new keys. A source that stays
    down is refused at every refresh: count each one, and emit an event when
    ``outcome.reason`` differs from the old ``state.failing``.
    """
    if result.error is not None:
        detail = f"contract fetch: {result.detail or 'HTTP ' + str(result.status)}"
        return replace(state, failing=result.error), Rejected(result.error, detail)
    if result.status == 304 or result.body is None:
        return replace(state, failing=None), None
    outcome = decide(state.contract, result.body, scope, trusted_keys, check=check)
    if isinstance(outcome, Accepted):
        return RefreshState(outcome.contract, result.etag), outcome
    return RefreshState(state.contract, result.etag, outcome.reason), outcome


def next_fetch_at(now: float, interval: float, jitter: float, rng: Callable[[], float]) -> float:
    """``now + interval`` moved by up to ``jitter`` either way; ``rng()`` returns [0, 1)."""
    offset = (2.0 * rng() - 1.0) * jitter
    return now + max(1.0, interval + offset)


def status_error(status: int) -> str:
    """The bounded error code for an unexpected HTTP status."""
    if status in (404, 500):
        return f"fetch_error:{status}"
    if 400 <= status < 500:
        return "fetch_error:4xx"
    if 500 <= status < 600:
        return "fetch_error:5xx"
    return "fetch_error:status"


def check_url(url: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port, request target) of an http(s) URL; ValueError otherwise.

    Call it on the configured URL at start, so a typo fails there, not every 60 s.
    """
    parts = urlsplit(url)
    port = parts.port  # raises ValueError for a bad port
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"contract URL must be http(s)://host[:port]/path, got {url!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port, target


def fetch(url: str, etag: str | None, timeout_s: float = FETCH_TIMEOUT_S,
          limit: int = MAX_ENVELOPE_BYTES) -> FetchResult:
    """GET ``url`` with If-None-Match ``etag``; the whole exchange ends within about ``timeout_s``."""
    try:
        scheme, host, port, target = check_url(url)
    except ValueError as exc:
        return FetchResult(0, etag, error="fetch_error:protocol", detail=str(exc))
    conn = _connection(scheme, host, port, timeout_s)
    try:
        return _exchange(conn, target, etag, limit, time.monotonic() + timeout_s)
    except TimeoutError:
        return FetchResult(0, etag, error="fetch_error:timeout", detail=f"no answer within {timeout_s} s")
    except ConnectionRefusedError as exc:
        return _failed(etag, "fetch_error:refused", exc)
    except http.client.IncompleteRead as exc:
        return _failed(etag, "truncated", exc)
    except http.client.HTTPException as exc:
        return _failed(etag, "fetch_error:protocol", exc)
    except OSError as exc:  # DNS, reset, TLS
        return _failed(etag, "fetch_error:network", exc)
    finally:
        conn.close()


def _failed(etag: str | None, code: str, exc: Exception) -> FetchResult:
    return FetchResult(0, etag, error=code, detail=f"{type(exc).__name__}: {exc}"[:200])


def _connection(scheme: str, host: str, port: int | None, timeout_s: float) -> http.client.HTTPConnection:
    if scheme == "http":
        return http.client.HTTPConnection(host, port, timeout=timeout_s)
    return http.client.HTTPSConnection(host, port, timeout=timeout_s, context=_tls_context())


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """Built once, at the first https fetch: loading the CA store is not free."""
    return ssl.create_default_context()


def _exchange(conn: http.client.HTTPConnection, target: str, etag: str | None, limit: int,
              deadline: float) -> FetchResult:
    headers = {"Accept": "application/json", "User-Agent": "sco-agent", "Connection": "close"}
    if etag:
        headers["If-None-Match"] = etag
    conn.request("GET", target, headers=headers)
    # Kept before getresponse(), which drops conn.sock when the server closes
    # after the response; the response still reads from this socket.
    sock = conn.sock
    _shrink_timeout(sock, deadline)
    resp = conn.getresponse()
    new_etag = resp.getheader("ETag") or None
    if resp.status == 304:
        return FetchResult(304, new_etag or etag)
    if resp.status != 200:
        return FetchResult(resp.status, etag, error=status_error(resp.status),
                           detail=f"HTTP {resp.status} {resp.reason}"[:200])
    length_header = (resp.getheader("Content-Length") or "").strip()
    length = int(length_header) if length_header.isascii() and length_header.isdigit() else None
    if length is not None and length > limit:
        # Refused on the header alone: the body is never read.
        return FetchResult(200, etag, error="too_large", detail=f"Content-Length {length} > {limit}")
    body = _read_bounded(resp, sock, limit, deadline)
    if body is None:
        return FetchResult(200, etag, error="too_large", detail=f"body over {limit} bytes")
    if length is not None and len(body) != length:
        # read1() returns short at EOF instead of raising IncompleteRead.
        return FetchResult(200, etag, error="truncated", detail=f"{len(body)} of {length} bytes")
    return FetchResult(200, new_etag, body=body)


def _read_bounded(resp: http.client.HTTPResponse, sock: socket.socket | None, limit: int,
                  deadline: float) -> bytes | None:
    """The body, or None past ``limit`` bytes (reading stops at limit + 1)."""
    chunks: list[bytes] = []
    size = 0
    while not resp.isclosed():  # closed: the whole Content-Length has been read
        # Per-read timeouts alone let a server trickle a byte at a time for
        # ever; shrinking them to the time left bounds the whole body.
        _shrink_timeout(sock, deadline)
        # read1: one recv at most, so a trickle cannot hold one call past the deadline.
        chunk = resp.read1(min(_CHUNK, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(chunks)


def _shrink_timeout(sock: socket.socket | None, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    if sock is not None:
        sock.settimeout(remaining)
