"""Wake supervisord's loop when a signal lands, so an exited worker is reaped at once.

Why: supervisord's loop (supervisor/supervisord.py ``runforever``) blocks in ``poll(timeout=1)``
and only then reaps children and handles the signals its handler recorded. A signal does not cut
that poll short: Python retries a select/poll interrupted by a signal (PEP 475) after running
the handler, and supervisord's handler (``SignalReceiver.receive``) only appends to a list. A
worker's stdout EOF does wake the loop, but a worker with threads to tear down is not a zombie yet
at that moment. So each exit waited up to 1 s for nothing: a crashed executor was restarted up to
a second late, and a stop, which goes one program at a time, took about a second per program
(tests measured 5.4 s for the four). A unit restart in the middle of a drain pays that.

How: the self-pipe trick. The plugin wraps the signal receiver's ``receive`` (before supervisord's
``setsignals`` installs it) so that, after recording the signal as before, it writes a byte to a
pipe whose read end sits in supervisord's socket map; the retried poll sees it readable and
returns, and the loop turns: reap, handle_signal, as before.

Why not ``signal.set_wakeup_fd``: at a ``reload`` supervisord closes every descriptor from 5 up
(``options.cleanup_fds``) before the plugin runs again, and in a worker it forks it closes them
before exec or the zygote; a C-level wakeup fd would then write into whatever file reuses the
number. Here the write is ours, and is made only while the descriptor is still the pipe it was
(same device and inode), so a stale number is never written to or closed.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from common.proven import why_not

_WAKERS: list[Waker] = []   # the current one, kept across `reload` (module state outlives a run)


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Waker:
    """A pipe in supervisord's socket map: the asyncore-dispatcher interface its loop calls."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.identity = _identity(self.r)
        self.pokes = 0

    def ours(self, fd: int) -> bool:
        """``fd`` is still this pipe (not closed by supervisord, nor reused for another file)."""
        return fd >= 0 and self.identity is not None and _identity(fd) == self.identity

    def poke(self) -> None:
        """From the signal handler: one byte (a full pipe is already a pending wake-up)."""
        if self.ours(self.w):
            try:
                os.write(self.w, b"\0")
                self.pokes += 1
            except OSError:
                pass

    # -- what supervisord's loop calls on a dispatcher in its socket map
    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def handle_read_event(self) -> None:
        if not self.ours(self.r):
            return
        try:
            while os.read(self.r, 4096):
                pass
        except OSError:   # BlockingIOError: drained
            pass

    def handle_write_event(self) -> None:
        pass

    def handle_error(self) -> None:
        pass

    def close(self) -> None:
        for fd in (self.r, self.w):
            if self.ours(fd):
                os.close(fd)
        self.r = self.w = -1

    def __repr__(self) -> str:   # in supervisord's blather log: "read event caused by <sco-agent wake pipe>"
        return "<sco-agent wake pipe>"


def install(supervisord: Any) -> tuple[Waker | None, str]:
    """Wake this run of supervisord on every signal; (waker, error). Never raises.

    Called from the zygote's factory, once per http server of each run (``make_http_servers``
    calls the factories per server): a second call in the same run keeps what the first set up.
    """
    reason = why_not("supervisord_plugins.wake")   # supervisor's receiver and loop as tested (common/proven.py)
    if reason:
        return None, reason
    try:
        options = supervisord.options
        socket_map: dict[int, Any] = options.get_socket_map()
        receiver = options.signal_receiver
        receive: Callable[[int, Any], None] = receiver.receive
        for current in _WAKERS:
            if getattr(receive, "waker", None) is current and socket_map.get(current.r) is current:
                return current, ""
            # The last run's: supervisord has closed its descriptors (or will never look at it again).
            if socket_map.get(current.r) is current:
                del socket_map[current.r]
            current.close()
        _WAKERS.clear()
        original = getattr(receive, "wake_original", receive)
        waker = Waker()

        def receive_and_wake(sig: int, frame: Any) -> None:
            original(sig, frame)
            waker.poke()

        receive_and_wake.wake_original = original  # type: ignore[attr-defined]  # functions take attributes
        receive_and_wake.waker = waker  # type: ignore[attr-defined]
        receiver.receive = receive_and_wake
        socket_map[waker.r] = waker
        _WAKERS.append(waker)
        return waker, ""
    except Exception as e:  # noqa: BLE001 -- an error here would stop supervisord from starting
        return None, f"signals do not wake supervisord's loop: {type(e).__name__}: {e}"
