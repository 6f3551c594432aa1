"""Import nats-py without the parts the watcher never runs (docs/footprint.md: -4 MiB in the watcher).

nats-py's client module imports, at import time, three things the relay subscription
never uses (nats-py 2.16.0, nats/aio/client.py):

- ``nats.js``: JetStream, key-value and object store (``nats.js.client``, ``kv``,
  ``object_store``, ``manager``, ``api``), with what they import (uuid, hashlib's hmac,
  email.parser...). The core client touches it only through ``nats.js.api.Header`` when a
  message carries headers, and through ``jetstream()``. A stand-in module takes its place;
  the first attribute read imports the real one, so a message with headers still works.
- ``importlib.metadata``, only to read nats-py's own version for the CONNECT line
  (``version("nats-py")``): 1.9 MiB (email, zipfile, csv, pathlib, tempfile...). A stand-in
  answers that one question from the ``nats_py-*.dist-info`` directory name while nats
  is imported, and is removed again, so any later import gets the real module.
- ``aiohttp``, for websocket servers only: blocked unless a ``ws://`` server is configured
  (None in sys.modules makes the import fail at once, the documented way to block one).

Also, as for asyncio (watcher.asyncio_import), ``logging`` and ``traceback`` are stand-ins while
nats is imported (its ``_logger`` is a deferred one), and so is ``pkgutil``, for the
``extend_path`` of nats/__init__.py (watcher.stand_in.pkgutil_stand_in).

Where a part is not found (another nats-py layout) it is imported as nats-py does: more
memory, same behaviour. With a nats-py or CPython it was not tested with (common/proven.py:
nats-py 2.15.0 and 2.16.0, each run by tests/watcher/test_nats_import.py) ``nats`` is imported plainly.
tests/watcher/test_nats_import.py pins what is and is not loaded.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

from common.proven import installed_version, why_not
from watcher.stand_in import Deferred, logging_stand_in, pkgutil_stand_in, standing_in, traceback_stand_in

DISTRIBUTION = "nats-py"


def import_nats(servers: list[str]) -> Any:
    """The ``nats`` package, imported lean; the same object ``import nats`` gives."""
    if "nats" in sys.modules:
        return sys.modules["nats"]
    if why_not("watcher.nats_import"):   # not the tested nats-py or CPython (common/proven.py)
        import nats
        return nats
    if not any(s.startswith(("ws://", "wss://")) for s in servers):
        sys.modules.setdefault("aiohttp", None)  # type: ignore[arg-type]  # typeshed: modules only
    spec = importlib.util.find_spec("nats")   # a top-level spec: found, not executed
    location = list(spec.submodule_search_locations or []) if spec is not None else []
    lazy = _lazy_module("nats.js", location)
    stand_in = _metadata_stand_in(location)
    if lazy is not None:
        sys.modules["nats.js"] = lazy
    if stand_in is not None:
        sys.modules["importlib.metadata"] = stand_in
    try:
        # logging and traceback as for asyncio (watcher.asyncio_import); pkgutil for nats/__init__.py
        with standing_in(logging_stand_in(), traceback_stand_in(), pkgutil_stand_in()):
            import nats  # only the watcher pays for nats-py
    except BaseException:
        if lazy is not None and sys.modules.get("nats.js") is lazy:
            del sys.modules["nats.js"]
        raise
    finally:
        if stand_in is not None and sys.modules.get("importlib.metadata") is stand_in:
            del sys.modules["importlib.metadata"]
    if lazy is not None and getattr(nats, "js", None) is None:
        nats.js = lazy   # what the import system sets on the parent for a loaded submodule
    return nats


def _lazy_module(name: str, location: list[str]) -> types.ModuleType | None:
    """A stand-in for ``name`` that imports it at first use; None if it is not where expected."""
    if not location or importlib.machinery.PathFinder.find_spec(name, location) is None:
        return None
    return Deferred(name)


def _metadata_stand_in(location: list[str]) -> types.ModuleType | None:
    """A module with just ``version()``, answering for nats-py from its dist-info directory name."""
    if "importlib.metadata" in sys.modules or not location:
        return None
    known = installed_version(DISTRIBUTION, "nats")
    if not known:
        return None
    module = types.ModuleType("importlib.metadata", "stand-in while nats-py is imported (watcher.nats_import)")

    def version(distribution: str) -> str:
        if distribution != DISTRIBUTION:
            raise LookupError(distribution)   # nats-py catches any exception: version "0.0.0"
        return known

    module.version = version  # type: ignore[attr-defined]  # a plain module built here
    return module
