"""An [rpcinterface:probe] for tests/supervisord_plugins/test_launch.py: what supervisord has imported."""
from __future__ import annotations

import sys
from typing import Any

from supervisord_plugins.launch import StandIn

WATCHED = ("importlib.metadata", "importlib.resources", "importlib.abc", "zipfile", "csv", "bz2", "lzma",
           "supervisor.web", "supervisor.templating", "html.parser")


class Probe:
    def __init__(self, note: str) -> None:
        self.note = note

    def modules(self) -> dict[str, str]:
        """Each watched module: "absent", "stand-in" or "real"."""
        out = {}
        for name in WATCHED:
            module = sys.modules.get(name)
            out[name] = "absent" if module is None else "stand-in" if isinstance(module, StandIn) else "real"
        return out

    def getNote(self) -> str:  # camelCase: supervisor's XML-RPC convention
        return self.note


def make(supervisord: Any, note: str = "") -> Probe:
    return Probe(note)
