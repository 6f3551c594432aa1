"""What a worker forked from the zygote pays, step by step: private memory (USS) after each step.

    python -OO -m bench.import_cost STEP [STEP...]

The parent imports the zygote's PRELOAD and freezes the collector, as supervisord does;
one forked child then runs each STEP in turn -- a module name to import, or ``!code`` to
execute -- and reports its USS after each. The differences are what each step costs a
worker (docs/footprint.md): the module's own objects, and the pages of the parent it writes
to (copy on write) while importing. Example, the watcher's parts:

    python -OO -m bench.import_cost asyncio \\
        '!from watcher.nats_import import import_nats; import_nats(["nats://x"])' \\
        watcher.relay watcher.metadata_loop watcher.contract_keeper watcher.__main__
"""
from __future__ import annotations

import gc
import importlib
import os
import sys

import ujson

from bench.procstats import memory_kib
from supervisord_plugins.zygote import PRELOAD


def _uss_mib() -> float:
    return memory_kib(os.getpid())["uss"] / 1024


def run_steps(steps: list[str]) -> list[tuple[str, float]]:
    """(step, USS MiB after it) in a child forked from this (preloaded) process; "fork" first."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: never returns
        code = 0
        try:
            os.close(r)
            gc.freeze()
            out = [("fork", _uss_mib())]
            for step in steps:
                if step.startswith("!"):
                    exec(step[1:], {})   # noqa: S102 -- the bench's own command line
                else:
                    importlib.import_module(step)
                out.append((step, _uss_mib()))
            os.write(w, ujson.dumps(out).encode())
        except BaseException as e:  # noqa: BLE001 -- report, then leave the child
            os.write(w, ujson.dumps([("error", repr(e))]).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return [(str(step), value) for step, value in ujson.loads(data)]


def main(argv: list[str] | None = None) -> int:
    steps = sys.argv[1:] if argv is None else argv
    for name in PRELOAD:
        importlib.import_module(name)
    gc.freeze()
    previous = None
    print(f"python {sys.version.split()[0]}, optimize {sys.flags.optimize}; USS MiB of the forked child")
    for step, value in run_steps(steps):
        if step == "error":
            print(f"error: {value}")
            return 1
        delta = "" if previous is None else f"{value - previous:+.2f}"
        print(f"{step[:70]:<72} {value:7.2f} {delta}")
        previous = value
    return 0


if __name__ == "__main__":
    sys.exit(main())
