"""What every agent process does the same way: start-up, stop signals, and its link to the spool.

Kept small on purpose: each process's ``main()`` reads as "load config, open
sockets, loop"; the loop itself belongs to the process.
"""
from __future__ import annotations

import signal
import sys
import time
from typing import Any

import zmq

from common import ipc
from common.config import ENV_PATH, Config, ConfigError, load
from common.events import Outbox
from common.log import Logger

# supervisord treats these as unexpected exits and restarts the program; a bad
# configuration exits 2 so `supervisorctl status` shows the failure (FATAL after
# startretries) rather than a silent success.
EXIT_CONFIG = 2


class StopFlag:
    """Turns SIGTERM/SIGINT into an ordinary condition the loop checks."""

    def __init__(self) -> None:
        self.stopping = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, signum: int, frame: Any) -> None:
        self.stopping = True


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


def start(process: str, argv: list[str] | None = None) -> tuple[Config, Logger]:
    """Parse ``--config``, load and validate it; exit 2 with one clear log line if it is bad."""
    path = config_arg(process, sys.argv[1:] if argv is None else argv)
    log = Logger(process)
    try:
        config = load(path)
    except (ConfigError, OSError) as e:
        log.error("config.invalid", error=str(e))
        sys.exit(EXIT_CONFIG)
    ipc.ensure_runtime_dir(config.paths.runtime_dir)
    log.info("process.started", config=config.source, node=config.node.name)
    return config, log


class SpoolLink:
    """A process's events on their way to the spool: send, collect acks, resend the rest."""

    def __init__(self, ctx: zmq.Context, config: Config, process: str, log: Logger) -> None:
        self.log = log
        self.outbox = Outbox(process, config.node.name, config.node.hall)
        self.sock = ipc.connect(ctx, zmq.DEALER, config.paths.runtime_dir, ipc.SPOOL_INTAKE,
                                SNDHWM=10000)
        self.bad_acks = 0

    def emit(self, type: str, notice_id: str = "", data: dict[str, Any] | None = None,
             now: float | None = None) -> dict[str, Any]:
        ev = self.outbox.add(type, notice_id, data, now)
        ipc.send(self.sock, ipc.T_EVENT, ev)
        return ev

    def on_readable(self) -> None:
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                topic, body = ipc.decode(frames)
                ids = body.get("ids")
                if topic != ipc.T_ACK or not isinstance(ids, list):
                    raise ipc.BadMessage("not an ack")
            except ipc.BadMessage as e:
                self.bad_acks += 1
                self.log.warning("ipc.rejected", socket=ipc.SPOOL_INTAKE, error=str(e))
                continue
            self.outbox.acked([i for i in ids if isinstance(i, str)])

    def tick(self, now: float | None = None) -> None:
        for ev in self.outbox.due(time.time() if now is None else now):
            if not ipc.send(self.sock, ipc.T_EVENT, ev):
                break

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
