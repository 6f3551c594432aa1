"""What each shortcut into an interpreter's or a library's internals was proven on, and the one check.

The footprint work replaces parts of asyncio, nats-py, the idna codec and supervisor's spawning
with leaner stand-ins (docs/footprint.md). Each depends on internals no documentation promises:
what a module binds at import, a private attribute, supervisor calling ``options.execve``. So each
runs only where its tests ran -- the CPython series of tests/run.sh and the library versions below
-- and anywhere else steps aside: the plain import, supervisor's own path. The agent is then
correct, only heavier, and says so once at start (the watcher's log, supervisord's log).
tests/common/test_proven.py fakes an unknown version and shows the plain path running.

Versions are read without importing the library: a distribution's ``NAME-VERSION.dist-info``
directory next to its package, as pip installs it (the Binary distribution format, "The
.dist-info directory"); importlib.metadata would cost the 1.9 MiB the shortcuts save.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import NamedTuple

# The CPython series tests/run.sh runs the suite on (README "Tests"): 3.11.2 (Debian 12),
# 3.11.7, 3.12.1 and 3.13 (3.13.0, and 3.13.5 built from Debian 13's source package).
TESTED_PYTHONS = ((3, 11), (3, 12), (3, 13))
SUPERVISOR = ("4.3.0",)                          # setup.cfg's pin, run by every supervisord test
# tests/watcher/test_nats_import.py runs each. 2.14.0 was tried and is not admitted: its client imports
# email at import, so the lean import there is not what the footprint figures measured.
NATS_PY = ("2.15.0", "2.16.0")


class Proof(NamedTuple):
    """Where a shortcut was tested: CPython series, and (distribution, top-level package, versions)."""

    pythons: tuple[tuple[int, int], ...]
    library: tuple[str, str, tuple[str, ...]] | None = None


SHORTCUTS: dict[str, Proof] = {
    "watcher.asyncio_import": Proof(TESTED_PYTHONS),   # stand-ins bound while asyncio imports
    "watcher.idna_codec": Proof(TESTED_PYTHONS),       # encodings.idna's ASCII fast path
    "watcher.nats_import": Proof(TESTED_PYTHONS, ("nats-py", "nats", NATS_PY)),
    "supervisord_plugins.launch": Proof(TESTED_PYTHONS, ("supervisor", "supervisor", SUPERVISOR)),
    "supervisord_plugins.zygote": Proof(TESTED_PYTHONS, ("supervisor", "supervisor", SUPERVISOR)),
    "supervisord_plugins.wake": Proof(TESTED_PYTHONS, ("supervisor", "supervisor", SUPERVISOR)),
}
WATCHER = ("watcher.asyncio_import", "watcher.idna_codec", "watcher.nats_import")
SUPERVISORD = ("supervisord_plugins.launch", "supervisord_plugins.zygote", "supervisord_plugins.wake")


def python_series() -> tuple[int, int]:
    return sys.version_info[0], sys.version_info[1]


def installed_version(distribution: str, package: str) -> str:
    """The version of ``distribution`` whose top-level ``package`` the import system would load,
    from the dist-info directory beside it; "" if not exactly one is there."""
    try:
        spec = importlib.util.find_spec(package)   # found, not executed
    except (ImportError, ValueError):
        return ""
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    if spec is None or not (where or spec.origin):
        return ""
    site = os.path.dirname(where[0] if where else str(spec.origin))
    prefix = distribution.replace("-", "_").lower() + "-"
    try:
        found = [n for n in os.listdir(site) if n.lower().startswith(prefix) and n.endswith(".dist-info")]
    except OSError:
        return ""
    return found[0][len(prefix):-len(".dist-info")] if len(found) == 1 else ""


def why_not(shortcut: str) -> str:
    """"" where ``shortcut`` was proven; else why it steps aside, naming what was tested and what runs."""
    proof = SHORTCUTS[shortcut]
    series = python_series()
    tested = ", ".join(f"{major}.{minor}" for major, minor in proof.pythons)
    if series not in proof.pythons:
        return (f"{shortcut}: tested on CPython {tested}, this is {series[0]}.{series[1]}: "
                "stepping aside (the plain path: correct, more memory)")
    if proof.library is not None:
        distribution, package, versions = proof.library
        version = installed_version(distribution, package)
        if version not in versions:
            return (f"{shortcut}: tested with {distribution} {', '.join(versions)}, this is "
                    f"{distribution} {version or '(version unknown)'}: stepping aside (the plain path: "
                    "correct, more memory)")
    return ""


def unproven(shortcuts: tuple[str, ...]) -> list[str]:
    """Why each of ``shortcuts`` that steps aside here does: what a process logs once at start."""
    return [reason for reason in map(why_not, shortcuts) if reason]
