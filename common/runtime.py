"""What every agent process does the same way: start-up, stop signals, and its link to the spool.

Kept small on purpose: each process's ``main()`` reads as "load config, open
sockets, loop"; the loop itself belongs to the process.
"""
from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from typing import Any, Literal

import zmq

from common import ipc
from common.config import ENV_PATH, Config, ConfigError, load
from common.events import EventSink, EventType, Outbox
from common.journal import Journal, journal_path
from common.log import Logger
from common.recorder import Recorder

# supervisord treats these as unexpected exits and restarts the program; a bad
# configuration exits 2 so `supervisorctl status` shows the failure (FATAL after
# startretries) rather than a silent success.
EXIT_CONFIG = 2
# A refused input is counted every time, but reported (log line and spool event)
# at most this often per reason: a peer flooding garbage must not flood the log.
REJECT_REPORT_S = 10.0


class StopFlag:
    """Turns SIGTERM/SIGINT into an ordinary condition the loop checks.

    ``on_stop`` is for a loop that must be woken as well (the watcher's asyncio loop: the
    handler runs on the main thread, which is the loop's, between two of its steps).
    """

    def __init__(self, on_stop: Callable[[], object] | None = None) -> None:
        self.stopping = False
        self.on_stop = on_stop
        self._before = {sig: signal.signal(sig, self._set) for sig in (signal.SIGTERM, signal.SIGINT)}

    def close(self) -> None:
        """Put the handlers back as they were (a loop that ends before its process does)."""
        for sig, handler in self._before.items():
            signal.signal(sig, handler)

    def _set(self, signum: int, frame: Any) -> None:
        self.stopping = True
        if self.on_stop is not None:
            self.on_stop()


def config_arg(process: str, argv: list[str]) -> str | None:
    """The value of ``--config PATH`` / ``--config=PATH``; usage on -h, usage and exit 2 on anything else.

    Not argparse: it costs 0.4 MiB in every process (docs/footprint.md) to read one option.
    """
    usage = f"usage: sco-{process} [-h] [--config CONFIG]"
    path = None
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("-h", "--help"):
            print(f"{usage}\n\n  --config CONFIG  path of the TOML configuration (default ${ENV_PATH})")
            sys.exit(0)
        if arg == "--config" and rest:
            path = rest.pop(0)
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        else:
            print(f"{usage}\nsco-{process}: error: unrecognized or incomplete argument {arg!r}", file=sys.stderr)
            sys.exit(EXIT_CONFIG)
    return path


def start(process: str, argv: list[str] | None = None, shortcuts: tuple[str, ...] = ()) -> tuple[Config, Logger]:
    """Parse ``--config``, load and validate it; exit 2 with one clear log line if it is bad.
    ``shortcuts``: the process's lean imports (common/proven.py); each that steps aside here (an
    untested CPython or library) is said once, as ``process.shortcut_off``."""
    path = config_arg(process, sys.argv[1:] if argv is None else argv)
    log = Logger(process)
    try:
        config = load(path)
        ipc.ensure_runtime_dir(config.paths.runtime_dir)
    except (ConfigError, OSError) as e:
        log.error("config.invalid", error=str(e))
        sys.exit(EXIT_CONFIG)
    log.info("process.started", config=config.source, node=config.node.name)
    if shortcuts:
        from common.proven import unproven

        for reason in unproven(shortcuts):
            log.warning("process.shortcut_off", detail=reason)
    return config, log


class Rejections:
    """Input one process refused, counted as ``<what>.rejected.<reason>``, reported through a Recorder.

    The first refusal of each reason is reported at once (a log line, and an
    event when ``emit`` is given); later ones within ``every_s`` are only
    counted, and ``tick()`` reports what accumulated once the window has
    passed, so nothing counted goes unsaid (common/recorder.py). ``reason`` is
    the exception's ``reason`` attribute (a bounded label), else ``bad_value``.
    ``counts`` may be the process's own counter dict (the watcher publishes its counters);
    ``counted(reason, n)``, when set, hears every count (the verifier adds its own to its metrics).
    """

    def __init__(self, log: Logger, what: Literal["ipc", "socket"] = "ipc", emit: EventSink | None = None,
                 counts: dict[str, int] | None = None, every_s: float = REJECT_REPORT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.what, self.emit = log, what, emit
        self.event: EventType = "socket.rejected" if what == "socket" else "ipc.rejected"
        self.counted: Callable[[str, int], object] | None = None
        self.counts = counts if counts is not None else {}
        self.recorder = Recorder(self._say, every_s, clock)

    @property
    def total(self) -> int:
        prefix = f"{self.what}.rejected."
        return sum(n for key, n in self.counts.items() if key.startswith(prefix))

    def add(self, where: str, error: Exception) -> str:
        """Count one refusal; returns its reason."""
        reason = str(getattr(error, "reason", "") or "bad_value")
        self.count(where, reason, str(error), 1)
        return reason

    def count(self, where: str, reason: str, detail: str, n: int = 1) -> None:
        """Count ``n`` refusals of one reason (a bounded label) at once."""
        key = f"{self.what}.rejected.{reason}"
        self.counts[key] = self.counts.get(key, 0) + n
        if self.counted is not None:   # the verifier's own go straight into its metrics
            self.counted(reason, n)
        self.recorder.record(self.event, reason,
                             {"socket": where, "reason": reason, "detail": detail[:300]}, n)

    def count_disconnects(self, disconnects: ipc.Disconnects) -> None:
        """Count the connections our receiving sockets dropped (``peer_disconnected``, per socket); they
        are connected again (``ipc.Disconnects``)."""
        for name, n in disconnects.take().items():
            self.count(name, "peer_disconnected", "a connection to this receiving socket was dropped (its peer "
                       f"exited, or sent a message over {ipc.MAX_MESSAGE} bytes); connected again", n)

    def tick(self, force: bool = False) -> None:
        """Report every reason counted since its last report whose window has passed (all: ``force``)."""
        self.recorder.tick(force)

    def _say(self, type_: EventType, data: dict[str, Any]) -> None:
        self.log.warning(type_, **data)
        if self.emit is not None:
            self.emit(type_, data=data)


class SpoolLink:
    """A process's events on their way to the spool: journal, send, collect acks, resend the rest.

    ``emit`` returns only once the event is in the process's journal on disk
    (common.journal, under the state dir), and logs its id (``event.emitted``),
    so a SIGKILL at any moment after it loses nothing: the next start replays
    whatever the spool had not acknowledged.
    """

    def __init__(self, ctx: ipc.Context, config: Config, process: str, log: Logger) -> None:
        self.log = log
        self.outbox = Outbox(process, config.node.name, config.node.hall)
        self.sock = ipc.connect(ctx, zmq.DEALER, config.paths.runtime_dir, ipc.SPOOL_INTAKE,
                                SNDHWM=10000)
        self.rejections = Rejections(log, emit=self.emit)
        self.journal = Journal(journal_path(config.paths.state_dir, process))
        self.unjournaled = 0      # events the disk refused to journal: in memory only
        self._reporting = False
        sent = self.outbox.clock()
        for ev in self.journal.replayed:
            self.outbox.restore(ev, sent)
            self._send(ev)
        if self.journal.replayed:
            log.info("outbox.replayed", events=len(self.journal.replayed), path=self.journal.path)
        self.journal.replayed = []
        self._report_journal()

    def emit(self, type: EventType, notice_id: str = "", data: dict[str, Any] | None = None,
             now: float | None = None) -> dict[str, Any]:
        ev = self.prepare(type, notice_id, data, now)
        self.commit(ev)
        return ev

    def prepare(self, type: EventType, notice_id: str = "", data: dict[str, Any] | None = None,
                now: float | None = None) -> dict[str, Any]:
        """An event with its id and seq, neither journalled nor sent: for a process that saves it with
        its own state first (the watcher, whose notice and its ``notice.received`` must be on disk
        together), then ``commit``s it."""
        return self.outbox.add(type, notice_id, data, now)

    def adopt(self, ev: dict[str, Any]) -> None:
        """Take back an event a previous run saved with its state and may never have committed: the
        same id (the far end dedupes on it), unless the journal already gave it back."""
        if ev["event_id"] in self.outbox.pending:
            return
        self.outbox.restore(ev, self.outbox.clock())
        self.commit(ev)

    def commit(self, ev: dict[str, Any]) -> None:
        """Journal, log and send an event ``prepare`` made."""
        if not self.journal.append(ev):
            self.unjournaled += 1
        self.journal.bound(self.outbox.pending)
        self.log_emitted(ev)
        self._send(ev)
        if self.journal.errors:
            self._report_journal()

    def _send(self, ev: dict[str, Any]) -> bool:
        """Send one event; False only while the spool's queue is full (resent later)."""
        return ipc.send(self.sock, ipc.T_EVENT, ev, lambda e: self.refused(ev, e)) or ev["event_id"] not in self.outbox.pending

    def refused(self, ev: dict[str, Any], e: ipc.TooLarge) -> None:
        """An event larger than the spool accepts can never be delivered: counted, reported, and let go
        (resending it would only be refused again)."""
        self.acked([ev["event_id"]])
        self.rejections.add(ipc.SPOOL_INTAKE, e)

    def log_emitted(self, ev: dict[str, Any]) -> None:
        """The id on stderr, once the event is durable: what a process emitted can be counted from its
        log (bench.chaos does). A process that persists events with its own state (the verifier) calls
        this itself after saving."""
        self.log.info("event.emitted", event_id=ev["event_id"], type=ev["type"], seq=ev["seq"])

    def _report_journal(self) -> None:
        """Say what went wrong with the journal: a log line and an ``outbox.journal_error`` event each."""
        if self._reporting:
            return
        self._reporting = True
        try:
            while self.journal.errors:
                data = self.journal.errors.pop(0)
                self.log.error("outbox.journal_error", **data)
                self.emit("outbox.journal_error", data=data)
        finally:
            self._reporting = False

    def on_readable(self) -> None:
        acked: list[str] = []
        for frames in ipc.pending(self.sock):
            try:
                topic, body = ipc.decode(frames)
                ids = body.get("ids")
                if topic != ipc.T_ACK or not isinstance(ids, list):
                    raise ipc.BadMessage("not an ack")
            except ipc.BadMessage as e:
                self.rejections.add(ipc.SPOOL_INTAKE, e)
                continue
            acked += [i for i in ids if isinstance(i, str)]
        self.acked(acked)

    def acked(self, event_ids: list[str]) -> None:
        """The spool holds these: off the outbox, and (O(1) a batch, common.journal) out of the journal
        when it is time."""
        self.outbox.acked(event_ids)
        self.journal.acked(event_ids)
        self.journal.settle(self.outbox.pending)

    @property
    def bad_acks(self) -> int:
        return self.rejections.total

    def tick(self) -> None:
        """Resend what is due (the outbox's resend pacing is on its monotonic clock)."""
        self.rejections.tick()
        for ev in self.outbox.due():
            if not self._send(ev):
                break

    def close(self) -> None:
        """Let go of the journal (what is still pending in it is replayed by the next start)."""
        self.journal.close()

    def flush(self, timeout_s: float) -> bool:
        """On shutdown, wait a little for outstanding acks; True if none are left."""
        deadline = time.monotonic() + timeout_s
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while self.outbox.pending and time.monotonic() < deadline:
            if poller.poll(100):
                self.on_readable()
            self.tick()
        return not self.outbox.pending
