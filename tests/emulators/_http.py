"""Plain request/response values the emulators' pure handlers work on.

A handler takes a ``Request`` and returns a ``Response``; only ``_handler``
touches sockets. Header names in a ``Request`` are lower-cased once, here.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

CONTROL_PREFIX = "/_emu/"


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request as data: query values are the first of each name.

    ``target`` is the request-target as sent (path and query string), for rules that
    match on the query too.
    """

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes = b""
    target: str = ""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


# Given "should I stop?" (the server stops, the client hung up, the service went down),
# yields the pieces of a streamed body; the shell sends each as one HTTP/1.1 chunk.
Stream = Callable[[Callable[[], bool]], Iterable[bytes]]


@dataclass(frozen=True, slots=True)
class Response:
    """One HTTP answer; ``server`` is the Server header (the real services send their own).

    With ``stream`` the body is sent chunked as ``stream`` yields it (a watch), not ``body``.
    """

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    server: str = "emulator"
    stream: Stream | None = None


def json_response(status: int, value: Any, headers: tuple[tuple[str, str], ...] = (),
                  server: str = "emulator") -> Response:
    body = json.dumps(value).encode()
    return Response(status, body, (("Content-Type", "application/json"), *headers), server)


def text_response(status: int, text: str, content_type: str = "text/plain",
                  headers: tuple[tuple[str, str], ...] = (),
                  server: str = "emulator") -> Response:
    return Response(status, text.encode(), (("Content-Type", content_type), *headers), server)


def make_request(method: str, path: str, headers: Mapping[str, str] | None = None,
                 query: Mapping[str, str] | None = None, body: bytes = b"") -> Request:
    """Build a ``Request`` by hand, for driving the pure handlers without a socket."""
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    target = f"{path}?{urlencode(query)}" if query else path
    return Request(method, path, dict(query or {}), lowered, body, target)
