"""The watcher's event loop: asyncio's, resolving host names in a thread of its own.

asyncio resolves a host name (nats-py's ``open_connection`` to ``relay.<hall>.internal``, at
every connect and reconnect) with ``run_in_executor(None, socket.getaddrinfo, ...)``: its
default pool, which imports ``concurrent.futures`` (and with it ``logging`` and ``traceback``,
kept out by watcher.asyncio_import) and keeps a pool thread waiting for good. This loop,
a subclass of the one asyncio.run would make, resolves with ``watcher.in_thread`` instead:
the same call, off the loop, one short thread per lookup. ``getnameinfo`` likewise. An IP
literal is not resolved at all (asyncio's ``_ipaddr_info``), as before.

``run`` is ``asyncio.run`` on this loop, with the ``idna`` codec of watcher.idna_codec
registered first (getaddrinfo encodes every host name with it).
"""
from __future__ import annotations

import socket
from collections.abc import Coroutine
from typing import Any, TypeVar

from watcher import idna_codec
from watcher.asyncio_import import asyncio
from watcher.in_thread import in_thread, join_running

T = TypeVar("T")


class WatcherLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop; name lookups in a thread of their own instead of the default pool."""

    async def getaddrinfo(self, host: bytes | str | None, port: bytes | str | int | None, *,
                          family: int = 0, type: int = 0, proto: int = 0, flags: int = 0) -> Any:
        # asyncio's debug mode logs slow lookups (_getaddrinfo_debug): kept, with its pool.
        if self.get_debug():
            return await super().getaddrinfo(host, port, family=family, type=type, proto=proto, flags=flags)
        return await in_thread("getaddrinfo", socket.getaddrinfo, host, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr: Any, flags: int = 0) -> tuple[str, str]:
        return await in_thread("getnameinfo", socket.getnameinfo, sockaddr, flags)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a WatcherLoop; like it, returns once the calls off the loop have ended."""
    idna_codec.install()
    try:
        with asyncio.Runner(loop_factory=WatcherLoop) as runner:
            return runner.run(main)
    finally:
        join_running()
