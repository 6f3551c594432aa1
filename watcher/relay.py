"""The notice relay: a NATS subscription to this node's and this hall's subjects (nats-py).

Thin adapter: it hands every raw payload to ``on_payload`` and reports
connection changes to ``on_status(status, detail)`` (connected, disconnected,
reconnected, error, slow_consumer, closed, disabled); parsing and decisions live elsewhere.

Staying connected: nats-py, given ``max_reconnect_attempts=-1``, retries the
first connection and every reconnection forever (one try per
``reconnect_time_wait``) and re-sends our subscriptions after a server
restart. Should the client still end up closed, we start over with capped
backoff. Core NATS keeps nothing for a subscriber that is away, so a notice
published while we are disconnected is lost *on this channel*: the metadata
poll is the floor that still hears it.

Memory: ``import nats`` also imports its JetStream package, ``logging`` and
``importlib.metadata`` (nats-py offers no option against that), and imports
``aiohttp`` when it is installed, for ``ws://`` servers only. Unless a
``ws://`` server is configured we make that import fail, as Python's import
system documents for a ``None`` entry in ``sys.modules``.
"""
from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from typing import Any

from common.config import Config
from common.events import EventType
from common.http import strict_context, strict_refusal
from common.notice import relay_subjects
from watcher.nats_import import import_nats

RECONNECT_WAIT_S = 1.0        # the relay is the fast channel: come back quickly
RESTART_BACKOFF_MAX_S = 30.0
# One connect attempt (nats-py retries a down server inside it, reporting each error) is bounded:
# after a handshake our context refused, nats-py waits for ever for the transport to say it closed
# (its _close awaits StreamWriter.wait_closed: nats-io/nats.py#718, open), so without a bound one
# refused certificate would leave the relay silent until the watcher restarts.
CONNECT_ATTEMPT_S = 10.0
# A subscriber that falls behind drops messages instead of growing without bound:
# 1000 notices of at most 8 KiB is far beyond any real burst.
PENDING_MSGS = 1000
PENDING_BYTES = 1000 * 8192
Status = Callable[[str, str], None]
# The statuses that are events of their own (errors and drops are the watcher's throttled reports).
STATUS_EVENTS: dict[str, EventType] = {"connected": "relay.connected", "reconnected": "relay.connected",
                                       "disconnected": "relay.disconnected"}


def tls_context(config: Config) -> ssl.SSLContext | None:
    """A verifying client context when TLS is configured (CA, client cert, or tls:// URL)."""
    relay = config.relay
    if not (relay.tls_ca or relay.tls_cert or any(s.startswith("tls://") for s in relay.servers)):
        return None
    ctx = strict_context(relay.tls_ca)   # as every TLS client of the agent (common/http.py)
    if relay.tls_cert:
        ctx.load_cert_chain(relay.tls_cert, relay.tls_key or None)
    return ctx


def connect_options(config: Config, on_status: Status, closed: asyncio.Event) -> dict[str, Any]:
    """nats-py connect options; reads TLS and credentials files (OSError/ValueError if unusable)."""

    async def disconnected() -> None:
        on_status("disconnected", "")

    async def reconnected() -> None:
        on_status("reconnected", "")

    async def error(e: Exception) -> None:
        # nats-py reports each message it dropped for a full pending queue (PENDING_MSGS) as
        # a SlowConsumerError: a flood, counted apart from connection errors.
        status = "slow_consumer" if type(e).__name__ == "SlowConsumerError" else "error"
        on_status(status, (strict_refusal(e) or f"{type(e).__name__}: {e}")[:300])

    async def was_closed() -> None:
        closed.set()

    options: dict[str, Any] = {
        "servers": list(config.relay.servers), "allow_reconnect": True, "max_reconnect_attempts": -1,
        "reconnect_time_wait": RECONNECT_WAIT_S, "connect_timeout": 2, "ping_interval": 20,
        "max_outstanding_pings": 3, "disconnected_cb": disconnected, "reconnected_cb": reconnected,
        "error_cb": error, "closed_cb": was_closed, "name": f"sco-agent-watcher/{config.node.name}",
    }
    tls = tls_context(config)
    if tls is not None:
        options["tls"] = tls
    if config.relay.credentials_file:
        from watcher.nats_creds import callbacks

        options["user_jwt_cb"], options["signature_cb"] = callbacks(config.relay.credentials_file)
    return options


async def run_relay(config: Config, on_payload: Callable[[bytes, str], None],
                    on_status: Status, stop: asyncio.Event) -> None:
    """Subscribe until ``stop`` is set. Never raises for a server that is down."""
    servers = list(config.relay.servers)
    if not servers:
        on_status("disabled", "no relay servers configured")
        return
    nats = import_nats(servers)
    subjects = relay_subjects(config.node.hall, config.node.name)
    report = _unless_stopping(on_status, stop)

    async def handler(msg: Any) -> None:
        on_payload(msg.data, msg.subject)

    delay = RECONNECT_WAIT_S
    while not stop.is_set():
        closed = asyncio.Event()
        nc = None
        try:
            options = connect_options(config, report, closed)
            nc = await _until_stop(asyncio.wait_for(nats.connect(**options), CONNECT_ATTEMPT_S), stop)
            if nc is None:
                return
            for subject in subjects:
                await nc.subscribe(subject, cb=handler, pending_msgs_limit=PENDING_MSGS,
                                   pending_bytes_limit=PENDING_BYTES)
            await nc.flush(timeout=2)
        except Exception as e:  # noqa: BLE001 -- nats-py, ssl and file errors alike mean "retry later"
            report("error", f"connect: {_connect_failure(e)}"[:300])
            if nc is not None:
                await _close_quietly(nc)
            await _sleep(stop, delay)
            delay = min(delay * 2, RESTART_BACKOFF_MAX_S)
            continue
        delay = RECONNECT_WAIT_S
        report("connected", ",".join(subjects))
        await _until_stop(closed.wait(), stop)
        if stop.is_set():
            await _close_quietly(nc)
            return
        report("closed", "connection closed; starting over")
        await _sleep(stop, delay)


def _connect_failure(e: Exception) -> str:
    if isinstance(e, TimeoutError) and not str(e):
        return f"not connected within {CONNECT_ATTEMPT_S:g} s; starting over"
    return strict_refusal(e) or f"{type(e).__name__}: {e}"


def _unless_stopping(on_status: Status, stop: asyncio.Event) -> Status:
    """``on_status``, quiet once ``stop`` is set: the disconnect of our own drain on stop is no news."""
    def report(status: str, detail: str) -> None:
        if not stop.is_set():
            on_status(status, detail)

    return report


async def _until_stop(awaitable: Any, stop: asyncio.Event) -> Any:
    """The awaitable's result, or None (the awaitable cancelled) once ``stop`` is set."""
    task = asyncio.ensure_future(awaitable)
    stopper = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        stopper.cancel()
        return task.result()
    task.cancel()
    await asyncio.wait({task})   # let the cancellation land; its outcome no longer matters
    if not task.cancelled():
        task.exception()          # retrieved, so asyncio does not warn about it
    return None


async def _close_quietly(nc: Any) -> None:
    # Stopping or starting over: whatever the old connection says now is no news.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), timeout=2)


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass
