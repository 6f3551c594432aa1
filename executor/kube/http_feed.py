"""One HTTP/1.1 response, parsed as its bytes arrive (pure: bytes in; head, body, events out; no I/O).

The drain's one thread (``executor.kube.drain_io``) reads each of its sockets only when the
selector says it has bytes, and feeds them here, so no read ever waits for the rest of a
response. The framing is RFC 9112's: a status line, header fields up to an empty line, then the
body by ``Transfer-Encoding: chunked`` (section 7.1), by ``Content-Length``, or until the server
closes. A watch's 200 answer is chunked newline-delimited JSON, one ``{"type", "object"}`` event
a line (Kubernetes API concepts, "Efficient detection of changes"); its events are taken as each
line completes. Any other answer (an error Status, an eviction's answer) is collected whole, at
most ``max_body`` bytes.
"""
from __future__ import annotations

from typing import Any

import ujson

MAX_HEAD = 64 << 10
MAX_EVENT_BYTES = 4 << 20   # one pod is a few KiB; a line longer than this is not a pod event


class FeedError(Exception):
    """Not an HTTP response we can read (a broken status line, a bad chunk size, too large)."""


class ResponseFeed:
    """``stream``: a 200 body is watch events (``take_events``); else every body is collected."""

    def __init__(self, *, stream: bool = False, max_body: int = 16 << 20, max_line: int = MAX_EVENT_BYTES) -> None:
        self.stream = stream
        self.max_body = max_body
        self.max_line = max_line
        self.status = 0
        self.headers: dict[str, str] = {}   # lower-cased names
        self.body = bytearray()
        self.complete = False     # the whole response is in
        self.refused = ""         # a streamed line that is not an event: why (the stream is over)
        self._buf = bytearray()
        self._in_head = True
        self._mode = ""           # chunked | length | close
        self._left = 0            # length: body bytes to come; chunked: bytes left of this chunk
        self._chunk = "size"      # size | data | crlf | trailer
        self._line = bytearray()
        self._events: list[dict[str, Any]] = []

    @property
    def head_done(self) -> bool:
        return not self._in_head

    @property
    def keep_alive(self) -> bool:
        """May the connection carry the next request?"""
        return self.complete and self._mode != "close" and "close" not in self.headers.get("connection", "").lower()

    @property
    def events_follow(self) -> bool:
        return self.stream and self.status == 200

    def take_events(self) -> list[dict[str, Any]]:
        out, self._events = self._events, []
        return out

    def feed(self, data: bytes) -> None:
        if self.complete or self.refused:
            return
        self._buf += data
        if self._in_head:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD:
                    raise FeedError(f"a response head over {MAX_HEAD} bytes")
                return
            head, self._buf = bytes(self._buf[:end]), self._buf[end + 4:]
            self._parse_head(head)
        self._body()

    def closed(self) -> None:
        """The server closed the connection: the end of a body read until close (else it was cut short)."""
        if self._in_head:
            raise FeedError("the connection closed before a complete response head")
        if self._mode == "close":
            self.complete = True
        elif not self.complete and not self.events_follow:
            raise FeedError("the connection closed inside the response body")

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
            raise FeedError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self.status = int(parts[1])
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise FeedError(f"not a header field: {line[:80]!r}")
            self.headers[name.strip().decode("latin-1").lower()] = value.strip().decode("latin-1")
        self._in_head = False
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
        elif "content-length" in self.headers:
            length = self.headers["content-length"]
            if not (length.isascii() and length.isdigit()):
                raise FeedError(f"Content-Length {length[:40]!r}")
            self._mode, self._left = "length", int(length)
            if not self.events_follow and self._left > self.max_body:
                raise FeedError(f"Content-Length {length} > {self.max_body}")
        else:
            self._mode = "close"
        if self.status in (204, 304) or 100 <= self.status < 200:
            self._mode, self._left = "length", 0

    def _body(self) -> None:
        if self._mode == "length":
            take = bytes(self._buf[:self._left])
            del self._buf[:len(take)]
            self._left -= len(take)
            self._data(take)
            if self._left == 0:
                self.complete = True
        elif self._mode == "close":
            take, self._buf = bytes(self._buf), bytearray()
            self._data(take)
        else:
            self._chunks()

    def _chunks(self) -> None:
        while not self.complete and not self.refused:
            if self._chunk == "data":
                take = bytes(self._buf[:self._left])
                del self._buf[:len(take)]
                self._left -= len(take)
                self._data(take)
                if self._left:
                    return
                self._chunk = "crlf"
                continue
            end = self._buf.find(b"\r\n")
            if end < 0:
                if len(self._buf) > 1024:
                    raise FeedError("a chunk size line over 1024 bytes")
                return
            line = bytes(self._buf[:end])
            del self._buf[:end + 2]
            self._chunk_line(line)

    def _chunk_line(self, line: bytes) -> None:
        """A line of the chunked framing: the CRLF after a chunk's data, a chunk size, a trailer field."""
        if self._chunk == "crlf":
            if line:
                raise FeedError("chunk data longer than its size")
            self._chunk = "size"
        elif self._chunk == "size":
            size = line.split(b";", 1)[0].strip()
            try:
                self._left = int(size, 16)
            except ValueError:
                raise FeedError(f"not a chunk size: {size[:40]!r}") from None
            self._chunk = "data" if self._left else "trailer"
        elif not line:   # the empty line after the trailer fields
            self.complete = True

    def _data(self, data: bytes) -> None:
        if not data:
            return
        if not self.events_follow:
            if len(self.body) + len(data) > self.max_body:
                raise FeedError(f"body larger than {self.max_body}")
            self.body += data
            return
        self._line += data
        while not self.refused:
            end = self._line.find(b"\n")
            if end < 0:
                if len(self._line) > self.max_line:
                    self.refused = f"a line over {self.max_line} bytes"
                return
            line = bytes(self._line[:end + 1])
            del self._line[:end + 1]
            if len(line) > self.max_line:
                self.refused = f"a line over {self.max_line} bytes"
                return
            event, self.refused = watch_event(line)
            if event is None:
                return
            self._events.append(event)


def watch_event(line: bytes) -> tuple[dict[str, Any] | None, str]:
    """One line of a watch: (the event, "") or (None, why it is not one) -- garbage is refused, never
    guessed at (said by the drain as drain.list_failed, then the watch resumed)."""
    try:
        event = ujson.loads(line)
    except ValueError:
        return None, f"not JSON: {line[:80]!r}"
    if not (isinstance(event, dict) and isinstance(event.get("object"), dict)):
        return None, f"not a watch event: {line[:80]!r}"
    return event, ""
