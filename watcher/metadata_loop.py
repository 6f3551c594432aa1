"""The metadata poll loop: one provider source, driven from a worker thread.

Each round polls the source once and, in the same thread (a source is never
used by two threads at once), tells it which drains finished. The round runs
every ``metadata.poll_interval_s`` -- the floor -- and at once when the source
wakes us (GCP's long-poll heard a change) or the watcher does (a drain is
done, Azure should acknowledge). Results are applied on the event loop by the
watcher; every failure is counted there, never raised out of here.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

from common.config import Config
from common.recorder import Recorder
from watcher.in_thread import in_thread
from watcher.notice_book import NoticeBook
from watcher.notice_report import Report
from watcher.providers import MetadataError, MetadataSource, PollResult, Withheld, make_source

# However often something wakes the loop, rounds are at least this far apart.
MIN_GAP_S = 0.05


@dataclass(slots=True)
class Round:
    """What one round brought back: a result or an error, and the drains it failed to report."""

    done_at: float
    result: PollResult | None = None
    error: MetadataError | None = None
    unreported: tuple[str, ...] = ()
    withheld: tuple[Withheld, ...] = ()   # acknowledgements the source did not send, and why


class Host(Protocol):
    """What the loop needs from the watcher (kept narrow so tests can drive the loop alone)."""

    book: NoticeBook      # to name a withheld acknowledgement's notice as the watcher holds it
    reports: Recorder[Report]   # what the watcher says (a log line and an event)

    def count(self, name: str) -> None: ...

    def metadata_started(self, source: MetadataSource, wake: asyncio.Event) -> None:
        """Resume ``source`` from the notices held; ``wake.set()`` starts a round at once."""

    def take_drained(self) -> list[str]: ...

    def on_metadata_round(self, source: str, rnd: Round) -> None: ...

    def on_metadata_disabled(self, error: str) -> None: ...


def one_round(source: MetadataSource, drained: list[str]) -> Round:
    """Poll once, then report finished drains; blocking, for a worker thread."""
    now = time.time()
    rnd = Round(done_at=now)
    try:
        rnd.result = source.poll(now)
    except MetadataError as e:
        rnd.error = e
    except Exception as e:  # noqa: BLE001 -- a bug in one provider must not stop the watcher
        rnd.error = MetadataError("internal", f"{type(e).__name__}: {e}")
    if drained:
        try:
            rnd.withheld = tuple(source.drained(drained, now))
        except MetadataError as e:
            rnd.unreported = tuple(drained)
            rnd.result = rnd.result or PollResult()
            rnd.result.errors.append(MetadataError(f"ack_{e.reason}", e.detail))
        except Exception as e:  # noqa: BLE001 -- as above
            rnd.unreported = tuple(drained)
            rnd.result = rnd.result or PollResult()
            rnd.result.errors.append(MetadataError("internal", f"drained: {type(e).__name__}: {e}"))
    rnd.done_at = time.time()
    return rnd


async def poll_metadata(host: Host, config: Config, stop: asyncio.Event) -> None:
    """Run rounds of the configured provider's source until ``stop``."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    interval_s = config.metadata.poll_interval_s
    try:
        source = make_source(config, wake=lambda: loop.call_soon_threadsafe(wake.set))
    except ValueError as e:
        host.on_metadata_disabled(str(e))
        return
    if source is None:
        return
    host.metadata_started(source, wake)
    try:
        while not stop.is_set():
            wake.clear()
            started = loop.time()
            rnd = await in_thread("metadata-poll", one_round, source, host.take_drained())
            host.on_metadata_round(source.name, rnd)
            say_withheld(host, source.name, rnd.withheld)
            await asyncio.sleep(max(0.0, MIN_GAP_S - (loop.time() - started)))
            await _first(stop, wake, timeout=max(0.0, interval_s - (loop.time() - started)))
    finally:
        source.close()


def say_withheld(host: Host, source: str, withheld: tuple[Withheld, ...]) -> None:
    """Each acknowledgement the source withheld (an Azure event shared with other VMs): counted,
    logged and sent (``notice.ack_withheld``), once per event (the source returns each once), so
    whoever waits for the platform to proceed early knows why it did not."""
    for w in withheld:
        host.count(f"ack_withheld.{w.reason}")
        host.reports.record("notice.ack_withheld", w.notice_id, {
            "notice_id": host.book.resolve(w.notice_id), "provider": source, "reason": w.reason,
            "detail": w.detail, "others": list(w.others), "id_on_channel": w.notice_id})


async def _first(stop: asyncio.Event, wake: asyncio.Event, timeout: float) -> None:
    """Return when ``stop`` or ``wake`` is set, or after ``timeout`` seconds."""
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
