"""sco-listener: supervisord event listener that records agent processes exiting into the spool.

supervisord's listener protocol (supervisor/childutils.py): write ``READY``,
read one header line and ``len`` bytes of payload, answer ``RESULT 2\\nOK``.
stdout carries only that protocol, flushed on every write; diagnostics go to
stderr (the Logger). Every event is acknowledged ``OK``, including ones we
ignore: the record that matters is the spool's, which the event is handed to
through the same resend-until-acknowledged link every agent process uses.
supervisord's own listener buffer drops the oldest event when full, so this
is a signal, never the only record (supervisord's log has every exit too).

Events: PROCESS_STATE_EXITED (``expected`` says whether the exit code was one
of the program's exitcodes) and PROCESS_STATE_FATAL (gave up restarting).
supervisord does not put the exit status in the event, and by the time a
listener could ask for it an autorestarted program has been respawned, so the
event records the pid and ``expected`` instead.
"""
from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from typing import IO, Any, TextIO

import zmq

from common.runtime import SpoolLink, start

READY = "READY\n"
OK = "RESULT 2\nOK"
WATCHED = {"PROCESS_STATE_EXITED": "EXITED", "PROCESS_STATE_FATAL": "FATAL"}
ACK_WAIT_S = 0.5
TICK_S = 1.0
MAX_PAYLOAD = 1 << 20

Sink = Callable[[str, dict[str, Any]], None]


class ProtocolError(ValueError):
    """supervisord sent something that is not a listener header: stop, and be restarted."""


class Stopping(Exception):
    """SIGTERM: raised from the handler so an idle (indefinitely blocking) poll ends at once."""


def _stop(signum: int, frame: Any) -> None:
    raise Stopping()


def parse_tokens(text: str) -> dict[str, str]:
    """``key:value key:value`` -> dict (values never contain spaces in these events)."""
    out = {}
    for token in text.split():
        key, sep, value = token.partition(":")
        if sep:
            out[key] = value
    return out


def event_data(headers: dict[str, str], payload: str) -> dict[str, Any] | None:
    """The ``agent.process_exited`` data for a watched event, or None for any other."""
    state = WATCHED.get(headers.get("eventname", ""))
    if state is None:
        return None
    fields = parse_tokens(payload.split("\n", 1)[0])
    data: dict[str, Any] = {"program": fields.get("processname", ""), "group": fields.get("groupname", ""),
                            "state": state, "from_state": fields.get("from_state", "")}
    if state == "EXITED":
        data["expected"] = fields.get("expected") == "1"
        pid = fields.get("pid", "")
        data["pid"] = int(pid) if pid.isascii() and pid.isdigit() else None
    return data


def _text(data: str | bytes) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def handle(stdin: IO[Any], stdout: TextIO, sink: Sink) -> bool:
    """Read one event, give a watched one to ``sink``, acknowledge it. False at end of input.

    ``stdin`` may be binary (the real pipe: ``len`` counts bytes) or text (tests).
    """
    line = _text(stdin.readline())
    if not line:
        return False
    headers = parse_tokens(line)
    try:
        length = int(headers["len"])
    except (KeyError, ValueError):
        raise ProtocolError(f"not a listener header: {line[:200]!r}") from None
    if not 0 <= length <= MAX_PAYLOAD:
        raise ProtocolError(f"payload length {length} out of range")
    payload = _text(stdin.read(length))
    data = event_data(headers, payload)
    if data is not None:
        sink("agent.process_exited", data)
    stdout.write(OK)
    stdout.flush()
    return True


def ready(stdout: TextIO) -> None:
    stdout.write(READY)
    stdout.flush()


def main(argv: list[str] | None = None) -> int:
    config, log = start("listener", argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    ctx = zmq.Context()
    link = SpoolLink(ctx, config, "listener", log)
    poller = zmq.Poller()
    poller.register(link.sock, zmq.POLLIN)
    poller.register(sys.stdin.fileno(), zmq.POLLIN)

    def sink(event: str, data: dict[str, Any]) -> None:
        log.info(event, **data)
        link.emit(event, "", data)
        # Wait briefly for the spool's ack; what is not acked stays pending and is resent.
        deadline = time.monotonic() + ACK_WAIT_S
        while link.outbox.pending and time.monotonic() < deadline:
            if link.sock.poll(50, zmq.POLLIN):
                link.on_readable()

    # Bytes, not text: the header's len counts bytes.
    stdin = sys.stdin.buffer
    code = 0
    try:
        ready(sys.stdout)
        while True:
            # Idle means asleep: wake on a timer only while events wait for the spool's ack.
            events = dict(poller.poll(int(TICK_S * 1000) if link.outbox.pending else None))
            if link.sock in events:
                link.on_readable()
            link.tick()
            if sys.stdin.fileno() in events:
                if not handle(stdin, sys.stdout, sink):
                    break
                ready(sys.stdout)
    except ProtocolError as e:
        log.error("listener.protocol_error", error=str(e))
        code = 1
    except Stopping:
        pass
    link.flush(1.0)
    ctx.destroy(linger=0)
    log.info("process.stopped")
    return code


if __name__ == "__main__":
    sys.exit(main())
