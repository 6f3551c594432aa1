"""The spool as the other processes see it: a ROUTER on spool.intake that acknowledges every event.

The real spool (spool/intake.py) answers each ``event`` frame with an ``ack`` naming its id;
the senders (common.runtime.SpoolLink) resend until acknowledged, so one event may arrive
more than once: ``SpoolInbox`` keeps each event id once, in arrival order, and counts every
frame. ``up = False`` plays a spool that is down: frames are read and dropped, not acked.

Two ways to use it:
- ``FakeSpool(run_dir)``: its own socket in its own thread (zmq sockets are not thread-safe);
- ``SpoolInbox`` alone, drained by a rig that already polls several sockets in one thread
  (``inbox.drain(router)`` whenever the ROUTER is readable).
"""
from __future__ import annotations

import threading
from typing import Any, Self

import zmq

from common import ipc
from tests.support.wait import at_least, wait_for


class SpoolInbox:
    """What the fake spool has received: unique events in arrival order, and every frame counted."""

    def __init__(self) -> None:
        self.up = True
        self.received = 0                                # every event frame, resends included
        self._events: dict[str, dict[str, Any]] = {}     # event_id -> event (resends collapse)
        self._lock = threading.Lock()

    def drain(self, router: zmq.Socket) -> None:
        """Read every pending frame on ``router``; keep and acknowledge each event (when up)."""
        while router.poll(0):
            ident, *frames = router.recv_multipart()
            if not self.up:
                continue
            topic, body = ipc.decode(frames)
            if topic != ipc.T_EVENT:
                continue
            with self._lock:
                self.received += 1
                self._events.setdefault(body["event_id"], body)
            router.send_multipart([ident, *ipc.encode(ipc.T_ACK, {"ids": [body["event_id"]]})])

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events.values())

    def of_type(self, type_: str, notice_id: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events
                if e["type"] == type_ and (notice_id is None or e.get("notice_id") == notice_id)]

    def wait_of_type(self, type_: str, n: int = 1, timeout: float = 10.0,
                     notice_id: str | None = None) -> list[dict[str, Any]]:
        """``of_type(...)`` once it has ``n`` events or more (then the caller asserts the exact list)."""
        return wait_for(at_least(n, lambda: self.of_type(type_, notice_id)), timeout,
                        lambda: f"{n} {type_} event(s), have {len(self.of_type(type_, notice_id))}")


class FakeSpool(SpoolInbox):
    """A ROUTER bound on ``run_dir``'s spool.intake, served by its own thread until ``stop()``."""

    def __init__(self, run_dir: str, ctx: zmq.Context | None = None) -> None:
        super().__init__()
        self.run_dir = run_dir
        self._ctx = ctx
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        if not self._ready.wait(5):
            raise TimeoutError(f"the fake spool did not bind in {self.run_dir}")
        return self

    def _run(self) -> None:
        ctx = self._ctx or zmq.Context()
        router = ipc.bind(ctx, zmq.ROUTER, self.run_dir, ipc.SPOOL_INTAKE)
        self._ready.set()
        try:
            while not self._stop.is_set():
                if router.poll(50):
                    self.drain(router)
        finally:
            router.close(0)
            if self._ctx is None:
                ctx.term()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
