"""The fuzz properties, run long: every property-based test of a parser, with many more examples.

    python -m bench.fuzz

CI runs each property with its own example count and a fixed seed (tests/support/fuzzing.py).
This runs the same properties -- every test module that uses ``tests.support.fuzzing.fuzz`` --
with ``SCO_FUZZ_SCALE`` times the examples (default 10), still derandomized, so a
failure found here reproduces by running the same command again. Prints one line per
property (examples run, held or FAILED), then one JSON line. Exit status 1 if any failed.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections import defaultdict
from typing import Any

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SCALE = "10"


def fuzz_modules() -> list[str]:
    """Test files that use the shared fuzz settings (the inventory in docs/reliability.md)."""
    found = []
    for root, _, files in os.walk(os.path.join(REPO, "tests")):
        for name in sorted(files):
            if name.startswith("test_") and name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    if "from tests.support.fuzzing import" in f.read():
                        found.append(os.path.relpath(path, REPO))
    return sorted(found)


class Count:
    """A pytest plugin: keep only property-based tests, count the examples each one runs."""

    def __init__(self) -> None:
        self.examples: dict[str, int] = defaultdict(int)
        self.outcome: dict[str, str] = {}
        self.seconds: dict[str, float] = defaultdict(float)
        self._wrapped: set[int] = set()

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        items[:] = [item for item in items if self._instrument(item)]

    def _instrument(self, item: Any) -> bool:
        handle = getattr(getattr(item, "obj", None), "hypothesis", None)
        if handle is None:
            return False
        name = self.name(item)
        if id(handle) not in self._wrapped:   # parametrized tests share one function
            self._wrapped.add(id(handle))
            inner = handle.inner_test

            @functools.wraps(inner)
            def counted(*args: Any, **kwargs: Any) -> Any:
                self.examples[name] += 1
                return inner(*args, **kwargs)

            # Hypothesis reads inner_test at each call, so a plugin may wrap it (as pytest-trio does).
            handle.inner_test = counted
        return True

    @staticmethod
    def name(item: Any) -> str:
        return item.nodeid.split("[")[0]

    def pytest_runtest_logreport(self, report: Any) -> None:
        name = report.nodeid.split("[")[0]
        self.seconds[name] += report.duration
        # A parametrized property fails if any of its cases does (in setup, call or teardown).
        if (report.when == "call" or report.outcome == "failed") and self.outcome.get(name) != "failed":
            self.outcome[name] = report.outcome


def main() -> int:
    os.environ.setdefault("SCO_FUZZ_SCALE", DEFAULT_SCALE)   # read by tests/support/fuzzing.py at import
    scale = os.environ["SCO_FUZZ_SCALE"]
    modules = fuzz_modules()
    count = Count()
    started = time.monotonic()
    os.chdir(REPO)
    pytest.main(["-q", "-p", "no:cacheprovider", "--no-header", "-o", "addopts=", *modules], plugins=[count])
    elapsed = time.monotonic() - started
    print(f"\n{len(count.outcome)} properties from {len(modules)} modules, scale x{scale}, {elapsed:.0f} s")
    for name in sorted(count.outcome):
        mark = "held" if count.outcome[name] == "passed" else count.outcome[name].upper()
        print(f"  {count.examples[name]:>7} examples  {count.seconds[name]:6.1f} s  {mark:7} {name}")
    failed = sorted(n for n, o in count.outcome.items() if o != "passed")
    print(json.dumps({"fuzz_scale": float(scale), "fuzz_properties": len(count.outcome),
                      "fuzz_examples": sum(count.examples.values()), "fuzz_failed": failed,
                      "fuzz_seconds": round(elapsed, 1)}))
    return 1 if failed or not count.outcome else 0


if __name__ == "__main__":
    sys.exit(main())
