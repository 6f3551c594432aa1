"""The one small HTTP client every process uses (stdlib ``http.client``).

Why not ``requests``: it costs about 9 MiB per process that imports it
(measured here), and the agent only makes a handful of plain calls -- metadata
polls, Kubernetes REST, Vector batches. What ``requests`` would add
(redirects, cookies, proxies, charset guessing) the agent must not do anyway.
What matters is here: one deadline on every call's whole exchange, a bounded
body read (a peer cannot fill our memory), and every failure mapped to one
small set of reasons.

The deadline: a socket timeout bounds each recv, so a peer that sends one
byte just inside it, again and again, would hold a call for ever. Here the
connect, the send, the status line, the headers and the body all share one
monotonic deadline: before every read from the socket its timeout is cut to
the time left (``_DeadlineReader``), and a read that starts past it fails.
"""
from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple
from urllib.parse import urlsplit


class HttpError(Exception):
    """A call that produced no usable answer. ``reason``: timeout | refused | too_large | error;
    for ``error``, ``cause`` says which: truncated (the body ended before its Content-Length),
    protocol (not HTTP), tls (the peer's certificate failed verification: a configuration error,
    not an outage) or network (reset, DNS, other TLS failures)."""

    def __init__(self, reason: str, detail: str, cause: str = "", status: int = 0) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.cause = cause or reason
        self.status = status   # the HTTP status, when a response was too large to read


class _DeadlineReader(io.RawIOBase):
    """The response's view of the socket: every read gets at most the time left to the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)   # holds the socket open while the body is read
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(left)
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    """An ``HTTPResponse`` whose status line, headers and body are read before one deadline."""

    def __init__(self, sock: socket.socket, debuglevel: int = 0, method: str | None = None,
                 url: str | None = None, *, deadline: float) -> None:
        super().__init__(sock, debuglevel, method, url)
        self.fp.close()
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline))


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)   # lower-cased names
    body: bytes = b""


class TlsFiles(NamedTuple):
    """Where a client's TLS material is; empty: none. ``ca_file``: a CA bundle instead of the system
    store; ``cert_file``/``key_file``: a client certificate (e.g. the kubelet's node identity),
    whose key may be in the certificate file."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


SYSTEM_TLS = TlsFiles()   # the system CA store, no client certificate


# Strict X.509 on every interpreter: Python 3.13's create_default_context() sets these two flags
# (ssl docs, "Changed in version 3.13"); 3.11 and 3.12 do not. Set here too, a certificate that
# lacks what RFC 5280 requires (an authorityKeyIdentifier, a CA's keyUsage or critical
# basicConstraints...) is refused on every node image alike, not accepted on 3.11 and refused the
# day the image moves to 3.13 (docs/reliability.md#strict-certificates).
STRICT_X509 = ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN
# OpenSSL's verification errors "in case a check in X509_V_FLAG_X509_STRICT mode fails"
# (include/openssl/x509_vfy.h, OpenSSL 3.0: X509_V_ERR_SIGNATURE_ALGORITHM_INCONSISTENCY = 78
# through X509_V_ERR_EC_KEY_EXPLICIT_PARAMS = 94).
STRICT_ONLY_ERRORS = range(78, 95)


def tls_context(files: TlsFiles = SYSTEM_TLS) -> ssl.SSLContext:
    """A client TLS context, verifying strictly (STRICT_X509). One context with the system CA store
    costs about 1 MiB: clients talking to the same server should share one (it is thread-safe)."""
    ctx = strict_context(files.ca_file)
    if files.cert_file:
        ctx.load_cert_chain(files.cert_file, files.key_file or None)
    return ctx


def strict_context(ca_file: str = "") -> ssl.SSLContext:
    """``ssl.create_default_context`` with STRICT_X509, whatever the interpreter's default."""
    ctx = ssl.create_default_context(cafile=ca_file or None)
    ctx.verify_flags |= STRICT_X509
    return ctx


def strict_refusal(e: BaseException) -> str:
    """What to tell the operator when ``e`` (or what it was raised from) is a certificate that only
    the strict checks refused: the missing or wrong extension, by OpenSSL's name; "" otherwise."""
    seen: BaseException | None = e
    for _ in range(4):   # nats-py and asyncio may wrap the ssl error
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError) and seen.verify_code in STRICT_ONLY_ERRORS:
            return (f"certificate refused by strict X.509 verification (RFC 5280): {seen.verify_message}; "
                    "reissue it with the extensions RFC 5280 requires (docs/reliability.md#strict-certificates)")
        seen = seen.__cause__ or seen.__context__
    return ""


class HttpClient:
    """Calls to one base URL, over one kept-alive connection that is rebuilt after any error."""

    def __init__(self, base_url: str, timeout_s: float = 5.0, max_body: int = 1 << 20,
                 tls: ssl.SSLContext | TlsFiles = SYSTEM_TLS) -> None:
        """``tls`` (https only): a context to share, or the files to build this client's own from."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self.max_body = max_body
        self._ssl: ssl.SSLContext | None = None
        if self.scheme == "https":
            self._ssl = tls if isinstance(tls, ssl.SSLContext) else tls_context(tls)
        self._conn: http.client.HTTPConnection | None = None

    @property
    def tls(self) -> ssl.SSLContext | None:
        """The TLS context (None for http://), to share with another client of the same server."""
        return self._ssl

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        """The kept-alive connection; ``timeout_s`` bounds a new connect (and TLS handshake) and the send."""
        if self._conn is None:
            if self._ssl is not None:
                self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout_s,
                                                         context=self._ssl)
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        else:
            self._conn.timeout = timeout_s
            if self._conn.sock is not None:
                self._conn.sock.settimeout(timeout_s)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                body: bytes | None = None, timeout_s: float | None = None,
                max_body: int | None = None) -> Response:
        """One call, over by ``timeout_s`` (default: the client's) from connect to the body's last byte.

        Raises HttpError for no answer, returns any HTTP status as a Response.
        """
        limit = self.max_body if max_body is None else max_body
        budget = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget
        what = f"{method} {path}"
        conn = self._connection(budget)
        conn.response_class = partial(_DeadlineResponse, deadline=deadline)   # type: ignore[assignment]
        try:
            if conn.sock is None:
                conn.connect()   # within timeout_s, TLS handshake included
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed")
            conn.sock.settimeout(left)   # sendall: one timeout for the whole request
            conn.request(method, self.prefix + path, body=body, headers=headers or {})
            resp = conn.getresponse()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            data = self._body(resp, hdrs.get("content-length"), what, limit)
            if resp.will_close:
                self.close()
            return Response(resp.status, hdrs, data)
        except HttpError:
            raise
        except (OSError, http.client.HTTPException) as e:   # ssl.SSLError and TimeoutError are OSErrors
            self.close()
            raise _no_answer(e, what, budget) from None

    def _body(self, resp: http.client.HTTPResponse, length: str | None, what: str, limit: int) -> bytes:
        """The whole body, at most ``limit`` bytes; closes the connection on a body it refuses."""
        expected = int(length) if length is not None and length.isascii() and length.isdigit() else None
        if expected is not None and expected > limit:
            self.close()   # never read a body we already know is too large
            raise HttpError("too_large", f"{what}: Content-Length {length} > {limit}", status=resp.status)
        data = resp.read(limit + 1)
        if len(data) > limit:
            self.close()
            raise HttpError("too_large", f"{what}: body larger than {limit}", status=resp.status)
        if resp.length:   # bytes of the Content-Length still missing: http.client returns short at EOF
            self.close()
            raise HttpError("error", f"{what}: {len(data)} of {expected} bytes", "truncated")
        return data


def _no_answer(e: Exception, what: str, budget: float) -> HttpError:
    """The failure reason of an exchange that ended without a complete answer."""
    if isinstance(e, TimeoutError):
        return HttpError("timeout", f"{what}: no complete answer within {budget:g} s")
    if isinstance(e, ConnectionRefusedError):
        return HttpError("refused", f"{what}: {e}")
    if isinstance(e, http.client.IncompleteRead):
        return HttpError("error", f"{what}: {e!r}", "truncated")
    if isinstance(e, http.client.HTTPException):
        return HttpError("error", f"{what}: {type(e).__name__}: {e}", "protocol")
    if isinstance(e, ssl.SSLCertVerificationError):
        return HttpError("error", f"{what}: {strict_refusal(e) or f'{type(e).__name__}: {e}'}", "tls")
    return HttpError("error", f"{what}: {type(e).__name__}: {e}", "network")
