"""Fetching the contract bundle: one conditional GET, and when to do the next.

The bundle is signed, so the transport adds no trust; it only has to be
cheap and bounded. A 304 (ETag unchanged) costs no parsing and no signature
check, which is what most of the 60 s refreshes are. Every failure becomes an
error code from ``contract_verify.REASONS``; nothing here raises for a
network or server fault.
"""
from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from common.contract import Contract
from common.http import SYSTEM_TLS, HttpClient, HttpError, tls_context
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
    """GET ``url`` with If-None-Match ``etag``; the whole exchange ends within ``timeout_s``
    (common.http's deadline: connect, headers and body alike)."""
    try:
        scheme, host, port, target = check_url(url)
        client = HttpClient(f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}", timeout_s=timeout_s,
                            max_body=limit, tls=_tls() if scheme == "https" else SYSTEM_TLS)
    except ValueError as exc:
        return FetchResult(0, etag, error="fetch_error:protocol", detail=str(exc))
    headers = {"Accept": "application/json", "User-Agent": "sco-agent", "Connection": "close"}
    if etag:
        headers["If-None-Match"] = etag
    try:
        resp = client.request("GET", target, headers=headers)
    except HttpError as exc:
        return _failed(etag, exc, timeout_s)
    finally:
        client.close()
    new_etag = resp.headers.get("etag") or None
    if resp.status == 304:
        return FetchResult(304, new_etag or etag)
    if resp.status != 200:
        return FetchResult(resp.status, etag, error=status_error(resp.status), detail=f"HTTP {resp.status}")
    return FetchResult(200, new_etag, body=resp.body)


# HttpError (reason, cause) -> the REASONS code a refused fetch reports.
_CODES = {("timeout", "timeout"): "fetch_error:timeout", ("refused", "refused"): "fetch_error:refused",
          ("error", "truncated"): "truncated", ("error", "protocol"): "fetch_error:protocol"}


def _failed(etag: str | None, exc: HttpError, timeout_s: float) -> FetchResult:
    if exc.reason == "too_large":
        # Refused unread (Content-Length) or at limit + 1 bytes; a big error page is still its status.
        if exc.status not in (0, 200):
            return FetchResult(exc.status, etag, error=status_error(exc.status), detail=f"HTTP {exc.status}")
        return FetchResult(200, etag, error="too_large", detail=exc.detail[:200])
    if exc.reason == "timeout":
        return FetchResult(0, etag, error="fetch_error:timeout", detail=f"no answer within {timeout_s} s")
    code = _CODES.get((exc.reason, exc.cause), "fetch_error:network")   # DNS, reset, TLS
    return FetchResult(0, etag, error=code, detail=exc.detail[:200])


@functools.cache
def _tls() -> ssl.SSLContext:
    """One client TLS context for every fetch, built at the first https fetch: loading the CA
    store is not free."""
    return tls_context()
