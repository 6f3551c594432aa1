"""asyncio, imported without what the watcher never runs (docs/footprint.md, "asyncio taken apart").

``import asyncio`` imports every submodule (its ``__init__`` star-imports them), and with them,
at import time:

- ``logging`` (with ``string``, ``traceback`` and their regular expressions): asyncio.log's
  logger, used in debug mode and when an error reaches the loop's default exception handler;
  ``concurrent.futures._base`` and nats-py (``watcher.nats_import``) make loggers too;
- ``concurrent.futures``: thread and process pools, for ``run_in_executor``/``to_thread``,
  ``wrap_future`` and ``run_coroutine_threadsafe``, none of which the watcher calls
  (``watcher.in_thread`` runs the blocking polls);
- ``traceback`` (which imports ``textwrap``): asyncio's debug mode and error reports;
- ``asyncio.sslproto`` (TLS connections only) and ``asyncio.staggered`` (happy eyeballs, which
  nats-py never asks for).

Each is a stand-in (``watcher.stand_in``) while asyncio is imported: an error reported through
asyncio's logger, a ``to_thread``, a debug-mode loop or a TLS relay imports the real module then
and works as before. -0.7 MiB in a forked watcher, with ``watcher.in_thread`` (measured in
docs/footprint.md, which also says why asyncio's other submodules are kept).

Import asyncio through this module, before anything imports it plainly: ``from
watcher.asyncio_import import asyncio`` in the watcher's entry and in the modules it imports
first (tests/watcher/test_lean_asyncio.py checks a running watcher). Where asyncio is already
loaded it is simply the loaded module. On a CPython series it was not tested on (common/proven.py)
it is the plain ``import asyncio``.
"""
from __future__ import annotations

import concurrent  # noqa: F401 -- the package only (empty): its attribute ``futures`` is the stand-in

from common.proven import why_not
from watcher.stand_in import Deferred, futures_stand_in, logging_stand_in, standing_in, traceback_stand_in

__all__ = ["asyncio"]

# Only on the CPython series this was tested on (common/proven.py): elsewhere what asyncio binds at
# import may differ, so it is imported plainly (the watcher logs why at start).
if why_not("watcher.asyncio_import"):
    import asyncio
else:
    with standing_in(logging_stand_in(), futures_stand_in(), traceback_stand_in(),
                     Deferred("asyncio.sslproto"), Deferred("asyncio.staggered")):
        import asyncio
