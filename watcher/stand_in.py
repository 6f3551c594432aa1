"""Stand-in modules: what a module binds at import but uses only on a path the watcher rarely takes.

A stand-in sits in ``sys.modules`` while one import runs (``standing_in``), so the modules
imported then bind it instead of the real module; it leaves ``sys.modules`` when that import
ends, so anyone importing the module later gets the real one. The first attribute read from a
stand-in that it does not hold itself imports the real module and answers from it: a path
that is taken works as before, paying the import then. What a stand-in holds itself is what
its importers read at import time, with the real module's values (tests/watcher/test_lean_asyncio.py
compares them with the real module's).

Not ``importlib.util.LazyLoader``: the import system reads ``__spec__`` of every module it
finds in sys.modules, which would run a lazily loaded module at once (docs/footprint.md).
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
import types
from collections.abc import Iterator
from typing import Any


def real_module(name: str) -> types.ModuleType:
    """The real module ``name``, imported now if need be (a stand-in in its place is removed)."""
    held = sys.modules.get(name)
    if isinstance(held, Deferred):
        del sys.modules[name]
    return importlib.import_module(name)   # a submodule: sets the parent's attribute to the real one


class Deferred(types.ModuleType):
    """Stands in for a module until an attribute it lacks is read; then imports the real one."""

    def __getattr__(self, attr: str) -> Any:
        return getattr(real_module(self.__name__), attr)

    def __repr__(self) -> str:   # module's own repr reads __file__, which would import the module
        return f"<module {self.__name__!r} (stand-in, not imported yet)>"


@contextlib.contextmanager
def standing_in(*stand_ins: types.ModuleType) -> Iterator[None]:
    """Each stand-in in sys.modules (unless its module is already loaded) while the block runs.

    A submodule's stand-in is also made its parent's attribute, as the import system does for
    a loaded submodule (``import a.b`` binds ``a`` and reads ``a.b`` later): at once if the
    parent is loaded (``concurrent``), else when the block has loaded it (``asyncio``). It stays
    there until the real submodule is imported and takes its place.
    """
    placed = [m for m in stand_ins if m.__name__ not in sys.modules]
    for module in placed:
        sys.modules[module.__name__] = module
        _as_attribute(module)
    try:
        yield
    finally:
        for module in placed:
            if sys.modules.get(module.__name__) is module:
                del sys.modules[module.__name__]
            _as_attribute(module)


def _as_attribute(module: types.ModuleType) -> None:
    parent, _, child = module.__name__.rpartition(".")
    holder = sys.modules.get(parent) if parent else None
    if holder is not None and not hasattr(holder, child):
        setattr(holder, child, module)


class DeferredLogger:
    """``logging.getLogger(name)`` before ``logging`` is imported.

    Until then nobody can have configured logging, so the logger would be at the root's default
    level, WARNING: a debug or info record is dropped (asyncio logs one at every new event loop,
    "Using selector"), as the real logger would drop it, without importing logging. Anything
    else (a warning, an error, ``setLevel``) imports logging and asks the real logger.
    """

    def __init__(self, name: str | None) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if not _logging_loaded():
            quiet = _UNCONFIGURED.get(attr)
            if quiet is not None:
                return quiet
        return getattr(real_module("logging").getLogger(self._name), attr)

    def __repr__(self) -> str:
        return f"<DeferredLogger {self._name}>"


WARNING = 30   # logging.WARNING: the root logger's level until logging is configured


# What an unconfigured logger does, for the calls asyncio makes on its everyday paths.
_UNCONFIGURED: dict[str, Any] = {
    "debug": lambda *args, **kwargs: None,
    "info": lambda *args, **kwargs: None,
    "isEnabledFor": lambda level: level >= WARNING,
    "getEffectiveLevel": lambda: WARNING,
}


def _logging_loaded() -> bool:
    held = sys.modules.get("logging")
    return held is not None and not isinstance(held, Deferred)


def get_logger(name: str | None = None) -> Any:
    """The stand-in's ``getLogger``: the real logger if ``logging`` is loaded, else one deferred."""
    if _logging_loaded():
        return sys.modules["logging"].getLogger(name)
    return DeferredLogger(name)


def logging_stand_in() -> Deferred:
    """``logging`` as asyncio, concurrent.futures and nats-py use it at import: level numbers, getLogger."""
    module = Deferred("logging", "stand-in (watcher.stand_in): imports logging at first use")
    # logging's level numbers (Lib/logging/__init__.py); asyncio.futures reads DEBUG at import.
    levels = {"CRITICAL": 50, "FATAL": 50, "ERROR": 40, "WARNING": 30, "WARN": 30, "INFO": 20, "DEBUG": 10, "NOTSET": 0}
    for level, number in levels.items():
        setattr(module, level, number)
    module.getLogger = get_logger  # type: ignore[attr-defined]  # a plain module built here
    return module


def futures_stand_in() -> Deferred:
    """``concurrent.futures`` as asyncio.tasks reads it at import: the three ``return_when`` values."""
    module = Deferred("concurrent.futures", "stand-in (watcher.stand_in): imports concurrent.futures at first use")
    for value in ("FIRST_COMPLETED", "FIRST_EXCEPTION", "ALL_COMPLETED"):
        setattr(module, value, value)   # Lib/concurrent/futures/_base.py: each is its own name
    return module


def traceback_stand_in() -> Deferred:
    """``traceback`` as the ``_asyncio`` extension reads it at import: ``extract_stack``, called in debug mode."""
    module = Deferred("traceback", "stand-in (watcher.stand_in): imports traceback at first use")

    def extract_stack(f: types.FrameType | None = None, limit: int | None = None) -> Any:
        return real_module("traceback").extract_stack(f if f is not None else sys._getframe(1), limit)

    module.extract_stack = extract_stack  # type: ignore[attr-defined]  # a plain module built here
    return module


def pkgutil_stand_in() -> Deferred:
    """``pkgutil`` as nats-py's ``__init__`` uses it: ``extend_path(__path__, __name__)``.

    extend_path appends to a package's path every other portion of it on sys.path: a directory
    of that name, a ``NAME.pkg`` file, anything a non-directory entry (a zip) may hold. Where
    sys.path has none of these (a venv with one nats-py), it returns a copy of the path, and so
    does this, without importing pkgutil (namedtuple, zipimport...); wherever one might be, the
    real extend_path answers.
    """
    module = Deferred("pkgutil", "stand-in (watcher.stand_in): imports pkgutil at first use")

    def extend_path(path: Any, name: str) -> Any:
        if isinstance(path, list) and "." not in name and not _may_extend(path, name):
            return path[:]
        return real_module("pkgutil").extend_path(path, name)

    module.extend_path = extend_path  # type: ignore[attr-defined]  # a plain module built here
    return module


def _may_extend(path: list[str], name: str) -> bool:
    """Whether any sys.path entry might hold another portion of package ``name`` (or is not a directory)."""
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        where = entry or os.getcwd()
        if not os.path.isdir(where):
            if os.path.exists(where):
                return True   # a zip or another importer's entry: let the real one look
            continue
        portion = os.path.join(entry, name)
        if os.path.isfile(portion + ".pkg") or (os.path.isdir(portion) and portion not in path):
            return True
    return False
