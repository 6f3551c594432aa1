"""A bench's worker process ends with the bench.

multiprocessing reaps its workers when the parent exits normally, but a bench killed (SIGKILL,
an OOM kill, a CI timeout) leaves them running: spawned agents that go on draining and
renewing leases, taking the CPU of every later run on the machine (one found alive 38 minutes
after its bench was killed, at some 2.5 % of a core). A worker watches its parent's pid and
exits once it is no longer its child (the kernel re-parents an orphan to init or a subreaper).
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time

POLL_S = 1.0


def exit_with_parent(poll_s: float = POLL_S) -> threading.Thread | None:
    """In a multiprocessing worker: a daemon thread that ends the process (exit status 1) once
    the process that started it has gone. None outside a multiprocessing worker."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return None
    parent_pid = parent.pid

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os._exit(1)   # no cleanup to run: the bench that wanted the results is gone

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread
