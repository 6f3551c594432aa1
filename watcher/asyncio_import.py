"""asyncio, imported without what the watcher never runs (docs/footprint.md, "asyncio taken apart").

``import asyncio`` imports every submodule (its ``__init__`` star-imports them), and with them,
at import time:

- ``logging`` (with ``string``, ``traceback`` and their regular expressions): asyncio.log's
  logger, used in debug mode and when an error reaches the loop's default exception handler;
  ``concurrent.futures._base`` and nats-py (``watcher.nats_import``) make loggers too;
- ``concurrent.futures``: thread and process pools, for ``run_in_executor``/``to_thread``,
  ``wrap_future`` and ``run_coroutine_threadsafe``, none of which the watcher calls
  (``watcher.in_thread`` runs the blocking polls);
- ``traceback`` (which imports ``textwrap``): asyncio's debug mode and error reports.

Each is a stand-in (``watcher.stand_in``) while asyncio is imported: an error reported through
asyncio's logger, a ``to_thread`` or a debug-mode loop imports the real module then and works
as before. asyncio's own submodules are all kept: none pays alone (measured), and those that
export classes (``TaskGroup``, ``Timeout``) could not be stood in for without changing asyncio.

Import this module first, before anything imports asyncio: ``from watcher.asyncio_import import
asyncio`` at the top of the watcher's entry (tests/watcher/test_lean_asyncio.py checks a running
watcher). Where asyncio is already loaded it is simply the loaded module.
"""
from __future__ import annotations

import concurrent  # noqa: F401 -- the package only (empty): its attribute ``futures`` is the stand-in

from watcher.stand_in import Deferred, futures_stand_in, logging_stand_in, standing_in, traceback_stand_in

__all__ = ["asyncio"]

with standing_in(logging_stand_in(), futures_stand_in(), traceback_stand_in(),
                 Deferred("asyncio.sslproto"), Deferred("asyncio.staggered")):
    import asyncio
