"""supervisord without the modules only its unused paths import: ``python -P -m supervisord_plugins.launch -c CONF``.

Why: everything supervisord has imported when it forks the workers is in every worker's
address space, and each page of it a worker touches is copied (docs/footprint.md). supervisor
imports at start, for paths the agent never takes:
- ``importlib.metadata`` (with ``zipfile``, ``csv``, ``shutil``, ``tempfile``, ``bz2``, ``lzma``,
  ``importlib.resources``, ``importlib.abc``...), only for its ``EntryPoint`` class, to load
  the ``module:attr`` specs of ``[rpcinterface:x]`` factories (supervisor/compat.py ``import_spec``);
- ``importlib.resources``, for ``resource_filename`` (``echo_supervisord_conf``'s sample file);
- the web UI (``supervisor.web``, its templating, ``html.parser``), built in
  ``make_http_servers`` (supervisor/http.py) for the status page nobody here opens.

How: the same discipline as watcher/nats_import.py. While supervisor's modules are imported,
stand-ins are in ``sys.modules``: a minimal ``EntryPoint`` that loads ``module:attr`` as the
real one does (the same pattern; anything it does not match goes to the real class), a
``files()`` that imports the real ``importlib.resources`` when called, and a ``supervisor.web``
whose UI handler builds the real one at the first request it is asked about. Any other
attribute of a stand-in module imports the real module. After supervisor's imports the stand-ins
leave ``sys.modules``, so whoever imports one of these modules later -- supervisord, a plugin, a
worker -- gets the real module. Nothing of supervisor is patched or copied; supervisorctl, the
XML-RPC interface, ``reload``, the plugins and the status page work as before
(tests/supervisord_plugins/test_launch.py, on a real supervisord).
"""
from __future__ import annotations

import importlib
import re
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from common.proven import why_not

# importlib.metadata.EntryPoint.pattern (CPython 3.11 Lib/importlib/metadata/__init__.py; the test
# compares the two, so an interpreter that changes it is noticed).
_SPEC = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


class StandIn(types.ModuleType):
    """A module in ``sys.modules`` until the real one is needed: any attribute it does not
    define imports the real module and is read from it."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)   # import machinery probing (__path__, __spec__...): not a use
        return getattr(real(self.__name__), name)


def real(name: str) -> types.ModuleType:
    """The real module ``name``, imported now if only its stand-in was there."""
    module = sys.modules.get(name)
    if isinstance(module, StandIn):
        del sys.modules[name]
        module = None
    if module is None:
        module = importlib.import_module(name)
    return module


class EntryPoint:
    """What supervisor.compat uses of importlib.metadata.EntryPoint: ``EntryPoint(None, spec, None).load()``."""

    def __init__(self, name: str | None, value: str, group: str | None) -> None:
        self.name, self.value, self.group = name, value, group

    def load(self) -> Any:
        match = _SPEC.match(self.value)
        if match is None:   # whatever the real class makes of it (an error), exactly
            return real("importlib.metadata").EntryPoint(self.name, self.value, self.group).load()
        obj: Any = importlib.import_module(match.group("module"))
        for attr in filter(None, (match.group("attr") or "").split(".")):
            obj = getattr(obj, attr)
        return obj


def files(package: Any) -> Any:
    """importlib.resources.files, imported when first called."""
    return real("importlib.resources").files(package)


class supervisor_ui_handler:   # supervisor's name for it (supervisor/web.py)
    """Installed in place of supervisor's web UI handler: the real one is built, with
    ``supervisor.web`` imported, the first time the HTTP server asks it anything."""

    def __init__(self, supervisord: Any) -> None:
        self.supervisord = supervisord
        self._real: Any = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_real":
            raise AttributeError(name)
        if self._real is None:
            self._real = real("supervisor.web").supervisor_ui_handler(self.supervisord)
        return getattr(self._real, name)


def _stand_in(name: str, **attrs: Any) -> StandIn:
    module = StandIn(name, "stand-in (supervisord_plugins/launch.py): the real module is imported at first use")
    module.__dict__.update(attrs)
    return module


@contextmanager
def standing_in(modules: dict[str, StandIn]) -> Iterator[None]:
    """``modules`` in sys.modules for the block, then out again (and off their parent packages),
    unless the real module took a stand-in's place meanwhile."""
    added = [name for name in modules if name not in sys.modules]
    for name in added:
        sys.modules[name] = modules[name]
    try:
        yield
    finally:
        for name in added:
            if sys.modules.get(name) is modules[name]:
                del sys.modules[name]
                parent, _, child = name.rpartition(".")
                if getattr(sys.modules.get(parent), child, None) is modules[name]:
                    delattr(sys.modules[parent], child)


def import_supervisord() -> Callable[..., Any]:
    """supervisor's ``main``, its modules imported with the stand-ins in place.

    The ``importlib`` stand-ins are there only while supervisor imports (supervisor.compat keeps
    what it took from them); ``supervisor.web`` stays, because ``make_http_servers`` imports it
    at every start and ``reload``: the real module replaces it at first use.
    """
    if why_not("supervisord_plugins.launch"):
        # Not the supervisor or CPython these stand-ins were tested with (common/proven.py):
        # supervisor's own imports (the zygote plugin says so in supervisord's log).
        module = importlib.import_module("supervisor.supervisord")
        plain: Callable[..., Any] = module.main
        return plain
    if "supervisor.web" not in sys.modules:
        sys.modules["supervisor.web"] = _stand_in("supervisor.web", supervisor_ui_handler=supervisor_ui_handler)
    with standing_in({"importlib.metadata": _stand_in("importlib.metadata", EntryPoint=EntryPoint),
                      "importlib.resources": _stand_in("importlib.resources", files=files),
                      # shutil (for tempfile, for supervisor.options) only notes whether they import.
                      "bz2": _stand_in("bz2"), "lzma": _stand_in("lzma")}):
        module = importlib.import_module("supervisor.supervisord")
        importlib.import_module("supervisor.rpcinterface")
    main: Callable[..., Any] = module.main
    return main


def main() -> None:
    """supervisord's own main() (it reads sys.argv, as the ``supervisord`` script)."""
    sys.argv[0] = "supervisord"
    import_supervisord()()


if __name__ == "__main__":
    # Through the module's own name, not this __main__ copy: a plugin checking for a StandIn
    # (or importing this module) must see the classes the stand-ins were made from.
    importlib.import_module("supervisord_plugins.launch").main()
