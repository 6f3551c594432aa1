"""The notice relay: a NATS subscription to this node's and this hall's subjects (nats-py).

Thin adapter: it hands every raw payload to ``on_payload`` and reports
connection changes to ``on_status``; parsing and decisions live elsewhere.
nats-py reconnects forever once connected and re-subscribes by itself after a
server restart; the first connection is retried here with capped backoff,
because ``nats.connect`` gives up when no server answers at start.
"""
from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import Callable
from typing import Any

from common.config import Config
from common.notice import relay_subjects

FIRST_CONNECT_BACKOFF_MAX_S = 10.0


def _tls_context(config: Config) -> ssl.SSLContext | None:
    relay = config.relay
    if not (relay.tls_ca or relay.tls_cert or any(s.startswith("tls://") for s in relay.servers)):
        return None
    ctx = ssl.create_default_context(cafile=relay.tls_ca or None)
    if relay.tls_cert:
        ctx.load_cert_chain(relay.tls_cert, relay.tls_key or None)
    return ctx


async def run_relay(config: Config, on_payload: Callable[[bytes, str], None],
                    on_status: Callable[[str, str], None], stop: asyncio.Event) -> None:
    """Subscribe until ``stop`` is set. Never raises for a server that is down."""
    import nats  # only the watcher pays for nats-py

    servers = list(config.relay.servers)
    if not servers:
        on_status("disabled", "no relay servers configured")
        return
    subjects = relay_subjects(config.node.hall, config.node.name)

    async def handler(msg: Any) -> None:
        on_payload(msg.data, msg.subject)

    async def disconnected() -> None:
        on_status("disconnected", "")

    async def reconnected() -> None:
        on_status("connected", "reconnected")

    async def error(e: Exception) -> None:
        on_status("error", f"{type(e).__name__}: {e}"[:300])

    options: dict[str, Any] = {
        "servers": servers, "allow_reconnect": True, "max_reconnect_attempts": -1,
        "reconnect_time_wait": 1, "connect_timeout": 2, "ping_interval": 20, "max_outstanding_pings": 3,
        "disconnected_cb": disconnected, "reconnected_cb": reconnected, "error_cb": error,
        "name": f"sco-agent-watcher/{config.node.name}",
    }
    tls = _tls_context(config)
    if tls is not None:
        options["tls"] = tls
    if config.relay.credentials_file:
        options["user_credentials"] = config.relay.credentials_file

    delay = 0.5
    nc = None
    while not stop.is_set():
        try:
            nc = await nats.connect(**options)
            break
        except Exception as e:  # noqa: BLE001 -- nats-py raises many types; all mean "retry later"
            on_status("error", f"connect: {type(e).__name__}: {e}"[:300])
            try:
                await asyncio.wait_for(stop.wait(), timeout=delay * random.uniform(0.8, 1.2))
            except TimeoutError:
                pass
            delay = min(delay * 2, FIRST_CONNECT_BACKOFF_MAX_S)
    if nc is None:
        return
    for subject in subjects:
        await nc.subscribe(subject, cb=handler)
    await nc.flush(timeout=2)
    on_status("connected", ",".join(subjects))
    await stop.wait()
    try:
        await nc.drain()
    except Exception as e:  # noqa: BLE001 -- shutting down; a failed drain only needs a mention
        on_status("error", f"drain on stop: {type(e).__name__}")
