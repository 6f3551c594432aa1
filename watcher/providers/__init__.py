"""Instance-metadata notice sources: one module per provider behind one small interface.

A source's ``poll(now)`` asks the metadata service once and returns what it
sees *now* (level-triggered): the notices currently announced and the ids it
has seen withdrawn. It raises ``MetadataError`` when the service gave no usable
answer at all; a partial answer (one of several documents failed) comes back
with the failures in ``PollResult.errors``, so a broken maintenance document
never hides a spot interruption. The watcher owns the loop, the interval and
the de-duplication, so a new provider is one new module registered in ``SOURCES``.

The three optional hooks have no-op defaults in ``BaseSource``:
``resume`` (after a watcher restart, the notices this source gave before),
``drained`` (the drain of these notices finished: Azure acknowledges; it returns the
acknowledgements it withheld, and why, for the watcher to say) and ``close``. A source is driven from one thread at a time; a source that wants
to be heard sooner than the next poll (GCP's long-poll) calls ``wake``.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from common.config import Config
from common.http import HttpClient, HttpError
from common.notice import Notice

SOURCES = {
    "aws": "watcher.providers.aws",
    "gcp": "watcher.providers.gcp",
    "azure": "watcher.providers.azure",
    "sco": "watcher.providers.sco",
}

# Called from a worker thread when a long poll has news; what it returns is ignored.
Wake = Callable[[], object]


class MetadataError(Exception):
    """The metadata service gave no usable answer. ``reason`` is a bounded label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail[:300]


@dataclass(frozen=True, slots=True)
class Withheld:
    """An acknowledgement a source did not send, and why (``reason``: a bounded label)."""

    notice_id: str
    reason: str
    detail: str
    others: tuple[str, ...] = ()   # the other machines the acknowledgement would have released


@dataclass(slots=True)
class PollResult:
    notices: list[Notice] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)
    errors: list[MetadataError] = field(default_factory=list)   # parts that failed this poll


class MetadataSource(Protocol):
    name: str

    def poll(self, now: float) -> PollResult: ...

    def resume(self, active: Iterable[Notice]) -> None: ...

    def drained(self, notice_ids: list[str], now: float) -> list[Withheld]: ...

    def close(self) -> None: ...


class BaseSource:
    """Defaults for the optional hooks, and the shared plumbing of an HTTP metadata source."""

    name = "base"

    def __init__(self, config: Config, http: HttpClient | None = None, wake: Wake | None = None) -> None:
        self.node = config.node.name
        self.instance_id = config.node.instance_id
        self.http = http or HttpClient(config.metadata.url, timeout_s=config.metadata.timeout_s,
                                       max_body=config.metadata.max_body)
        self.wake = wake

    def resume(self, active: Iterable[Notice]) -> None:
        """The notices this watcher announced before it restarted (ids as this source gave them)."""

    def drained(self, notice_ids: list[str], now: float) -> list[Withheld]:
        """The drain of the notices named by ``notice_ids`` finished; the acknowledgements
        withheld (none by default)."""
        return []

    def close(self) -> None:
        self.http.close()

    def own(self, notices: Iterable[Notice]) -> list[Notice]:
        """Of ``notices``, those this source derived (its ids start with ``<name>-``)."""
        return [n for n in notices if n.id.startswith(f"{self.name}-")]

    def fetch(self, method: str, path: str, headers: dict[str, str] | None = None,
              body: bytes | None = None, missing_ok: bool = False) -> bytes | None:
        """One call: the body of a 200, None for a 404 when ``missing_ok``, else MetadataError."""
        try:
            resp = self.http.request(method, path, headers=headers, body=body)
        except HttpError as e:
            raise MetadataError(e.reason, e.detail) from None
        if resp.status == 200:
            return resp.body
        if resp.status == 404 and missing_ok:
            return None
        raise MetadataError(http_reason(resp.status), f"{method} {path.split('?', maxsplit=1)[0]}")


def http_reason(status: int) -> str:
    """A bounded label for an HTTP status (a metric name must not take arbitrary values)."""
    return f"http_{status}" if 100 <= status <= 599 else "http_other"


def run_checks(checks: Iterable[Callable[[PollResult], None]]) -> PollResult:
    """Run every check into one result; a failed check is recorded, not fatal, unless all fail."""
    result = PollResult()
    ran = 0
    for check in checks:
        ran += 1
        try:
            check(result)
        except MetadataError as e:
            result.errors.append(e)
    if ran and len(result.errors) == ran:
        raise result.errors[0]
    return result


def make_source(config: Config, wake: Wake | None = None) -> MetadataSource | None:
    """The configured provider's source, or None when metadata polling is off."""
    provider = config.metadata.provider
    if provider == "none":
        return None
    module = SOURCES.get(provider)
    if module is None:
        raise ValueError(f"metadata provider {provider!r} is not implemented")
    source: MetadataSource = importlib.import_module(module).Source(config, wake=wake)
    return source
