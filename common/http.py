"""The one small HTTP client every process uses (stdlib ``http.client``).

Why not ``requests``: it costs about 9 MiB per process that imports it
(measured here), and the agent only makes a handful of plain calls -- metadata
polls, Kubernetes REST, Vector batches. What ``requests`` would add
(redirects, cookies, proxies, charset guessing) the agent must not do anyway.
What matters is here: a timeout on every call, a bounded body read (a peer
cannot fill our memory), and every failure mapped to one small set of reasons.
"""
from __future__ import annotations

import http.client
import ssl
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import urlsplit


class HttpError(Exception):
    """A call that produced no usable answer. ``reason``: timeout | refused | too_large | error."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


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


def tls_context(files: TlsFiles = SYSTEM_TLS) -> ssl.SSLContext:
    """A client TLS context. One context with the system CA store costs about 1 MiB: clients
    talking to the same server should share one (it is thread-safe)."""
    ctx = ssl.create_default_context(cafile=files.ca_file or None)
    if files.cert_file:
        ctx.load_cert_chain(files.cert_file, files.key_file or None)
    return ctx


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
        """One call; raises HttpError for no answer, returns any HTTP status as a Response."""
        limit = self.max_body if max_body is None else max_body
        conn = self._connection(self.timeout_s if timeout_s is None else timeout_s)
        try:
            conn.request(method, self.prefix + path, body=body, headers=headers or {})
            resp = conn.getresponse()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            length = hdrs.get("content-length")
            if length is not None and length.isascii() and length.isdigit() and int(length) > limit:
                self.close()   # never read a body we already know is too large
                raise HttpError("too_large", f"{method} {path}: Content-Length {length} > {limit}")
            data = resp.read(limit + 1)
            if len(data) > limit:
                self.close()
                raise HttpError("too_large", f"{method} {path}: body larger than {limit}")
            if resp.will_close:
                self.close()
            return Response(resp.status, hdrs, data)
        except HttpError:
            raise
        except TimeoutError as e:
            self.close()
            raise HttpError("timeout", f"{method} {path}: {e}") from None
        except ConnectionRefusedError as e:
            self.close()
            raise HttpError("refused", f"{method} {path}: {e}") from None
        except (OSError, http.client.HTTPException, ssl.SSLError) as e:
            self.close()
            raise HttpError("error", f"{method} {path}: {type(e).__name__}: {e}") from None
