"""A worker for tests/supervisord_plugins/test_zygote.py: says how it was started, then waits for SIGTERM.

``python -m``-free on purpose: it is run through a console script, like the agent's programs.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

# Read when this module is first imported: zmq is already there only in a worker forked
# from the zygote (which preloads it); this module itself imports nothing heavy.
FORKED = "zmq" in sys.modules


def report() -> dict[str, Any]:
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    return {"pid": os.getpid(), "ppid": os.getppid(), "forked": FORKED, "argv": sys.argv[1:], "comm": comm,
            "probe_var": os.environ.get("PROBE_VAR"), "program": os.environ.get("SUPERVISOR_PROCESS_NAME"),
            "cwd": os.getcwd(),
            "sigchld_default": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL, "stdin": sys.stdin.fileno()}


def main() -> int:
    print(json.dumps(report()))
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    mode = sys.argv[1] if len(sys.argv) > 1 else "idle"
    print("probe on stderr", file=sys.stderr)
    sys.stdout.flush()
    if mode == "raise":
        raise RuntimeError("probe crashed on purpose")
    if mode.startswith("exit"):
        return int(mode[4:])
    while not stop:
        signal.pause()
    print("probe stopping", flush=True)
    return 0
