"""supervisord's process-state events into the spool, from inside supervisord: no listener process.

Why here: an ``[eventlistener]`` is one more interpreter (4.8 MiB USS, and its
share of everything else) only to relay a few lines supervisord already has in
its own memory. supervisord publishes every state change through
``supervisor.events.notify`` (supervisor/events.py), called synchronously in
its main loop; a plugin loaded into supervisord (the zygote's
``[rpcinterface:zygote]`` factory, which supervisord calls at start and at each
``reload`` after ``events.clear()``, supervisor/supervisord.py ``run``)
subscribes to it with ``events.subscribe`` -- supervisor's documented way for
its own code and plugins to hear events.

The events are the ones the listener recorded (``WATCHED``; ``event_data`` is
the one place the mapping lives): PROCESS_STATE_EXITED and
PROCESS_STATE_FATAL, as ``agent.process_exited``, built from the same payload
text supervisord would have sent a listener.

Never in supervisord's way: the callback runs on supervisord's only thread, so
it does no blocking I/O. The event goes through a ``SpoolLink`` (common.runtime:
the resend-until-acknowledged link every agent process uses) whose DEALER
sends with NOBLOCK; acknowledgements are read, and what is still unacknowledged
resent, on supervisord's 5-second TICK event, also without blocking. The
outbox is bounded (``OUTBOX_LIMIT``): past it the oldest events are dropped and
the count travels in the next event (``outbox_dropped``) and in
``zygote.getState()``. Any exception is caught and counted: an error here must
never propagate into supervisord's loop, which would stop every worker.

The zmq context's I/O thread lives in supervisord; a worker forked in place by
the zygote inherits none of it (fork copies only the calling thread, and
supervisord closes every descriptor above 2 in the child before the point
where the zygote takes over) and opens its own context.
"""
from __future__ import annotations

import importlib
import os
from typing import Any

import zmq

from common.config import Config, ConfigError, load
from common.events import EventType, Outbox
from common.log import Logger
from common.runtime import SpoolLink

# supervisor's event name -> the state recorded; every other event is ignored.
WATCHED = {"PROCESS_STATE_EXITED": "EXITED", "PROCESS_STATE_FATAL": "FATAL"}
EVENT_TYPE: EventType = "agent.process_exited"
# Events kept for the spool while it is down: a crash loop of four programs with
# startretries=100 is 400 exits, so this covers a long outage; beyond it, counted drops.
OUTBOX_LIMIT = 1000
# Messages zmq queues for an absent spool (each resend of a pending event is one).
SEND_HWM = 1000
PROCESS = "supervisord"


def parse_tokens(text: str) -> dict[str, str]:
    """``key:value key:value`` -> dict (values never contain spaces in these events)."""
    out = {}
    for token in text.split():
        key, sep, value = token.partition(":")
        if sep:
            out[key] = value
    return out


def event_data(eventname: str, payload: str) -> dict[str, Any] | None:
    """The ``agent.process_exited`` data for a watched event, or None for any other.

    ``payload`` is supervisor's ``event.payload()`` text (the body a listener reads).
    supervisord does not put the exit status in the event; ``expected`` says whether it
    was one of the program's exitcodes.
    """
    state = WATCHED.get(eventname)
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


class SupervisorLogStream:
    """A text stream (for ``Logger``) that writes each line into supervisord's own log.

    supervisord's logger writes to its log file; its stderr may be a pipe to the
    journal, where a write could block supervisord's loop.
    """

    def __init__(self, logger: Any) -> None:
        self.logger = logger

    def write(self, text: str) -> int:
        line = text.rstrip("\n")
        if line:
            self.logger.info(line)
        return len(text)

    def flush(self) -> None:
        pass


class Forwarder:
    """Hands supervisord's watched events to the spool; the callback never blocks and never raises.

    The zmq context is opened lazily, in the process and the run that uses it, and closed at
    supervisord's SUPERVISOR_STATE_CHANGE_STOPPING: supervisord daemonizes (a fork, which
    leaves the context's I/O thread behind) after the factory runs, and at each ``reload``
    closes every descriptor from 5 up (options.cleanup_fds), the context's epoll included,
    which makes libzmq abort. Events meanwhile wait in the outbox, which outlives the links.
    """

    def __init__(self, config: Config, log: Logger) -> None:
        self.config, self.log = config, log
        self.outbox = Outbox(PROCESS, config.node.name, config.node.hall, limit=OUTBOX_LIMIT)
        self.link: SpoolLink | None = None
        self._ctx: Any = None
        self._pid = 0
        self.armed = True       # False between STOPPING and the next run's install()
        self.forwarded = 0
        self.errors = 0

    def on_event(self, event: Any) -> None:
        """supervisor's callback: a watched process event, a TICK (acks and resends), or STOPPING."""
        try:
            name = _event_name(event)
            if name == "SUPERVISOR_STATE_CHANGE_STOPPING":
                self.close()
                return
            if name.startswith("TICK_"):
                if name == "TICK_5":
                    self.pump()
                return
            data = event_data(name, event.payload())
            if data is None:
                return
            self.log.info(EVENT_TYPE, **data)
            link = self._link()
            if link is not None:
                link.emit(EVENT_TYPE, "", data)
            else:
                self.outbox.add(EVENT_TYPE, "", data)   # sent when the link is back (due on a tick)
            self.forwarded += 1
            self.pump()
        except Exception as e:  # noqa: BLE001 -- raising here would stop supervisord's loop
            self.errors += 1
            try:
                self.log.error("process_events.error", error=f"{type(e).__name__}: {e}")
            except Exception:  # noqa: BLE001,S110 -- not even a broken log may reach supervisord
                pass

    def _link(self) -> SpoolLink | None:
        if not self.armed:
            return None
        if self.link is None or self._pid != os.getpid():
            # A context inherited across a fork has no I/O thread: abandoned, never touched.
            self._ctx = zmq.Context()
            self._pid = os.getpid()
            self.link = SpoolLink(self._ctx, self.config, PROCESS, self.log)
            # The link replayed its journal (what an earlier supervisord emitted and the spool never
            # acked) into an outbox of its own: keep those pending in ours, which outlives links.
            for t, ev in self.link.outbox.pending.values():
                self.outbox.restore(ev, t)
            self.link.outbox = self.outbox
            self.link.sock.setsockopt(zmq.SNDHWM, SEND_HWM)
        return self.link

    def pump(self) -> None:
        """Read the spool's acknowledgements and resend what is due; never waits."""
        link = self._link()
        if link is not None:
            link.on_readable()
            link.tick()

    def close(self) -> None:
        """Before supervisord closes our descriptors: unsent events stay in the outbox."""
        self.armed = False
        if self.link is not None and self._pid == os.getpid():
            self._ctx.destroy(linger=0)
        self.link, self._ctx = None, None

    def state(self) -> dict[str, Any]:
        return {"forwarded": self.forwarded, "pending": len(self.outbox.pending), "dropped": self.outbox.dropped,
                "errors": self.errors}


_FORWARDER: list[Forwarder] = []   # one per supervisord process, kept across `reload`


def _event_name(event: Any) -> str:
    events = importlib.import_module("supervisor.events")
    return str(events.getEventNameByType(type(event)) or "")


def install(supervisord: Any, config_path: str | None) -> tuple[Forwarder | None, str]:
    """Subscribe to supervisord's events (again after a ``reload``); (forwarder, error). Never raises."""
    try:
        events = importlib.import_module("supervisor.events")
        if not _FORWARDER:
            logger = getattr(getattr(supervisord, "options", None), "logger", None)
            stream: Any = SupervisorLogStream(logger) if logger is not None else None
            _FORWARDER.append(Forwarder(load(config_path or None), Logger(PROCESS, stream=stream)))
        forwarder = _FORWARDER[0]
        forwarder.armed = True
        # run() cleared the callbacks (supervisord.py): subscribing again is not subscribing twice.
        if (events.ProcessStateEvent, forwarder.on_event) not in events.callbacks:
            for kind in (events.ProcessStateEvent, events.TickEvent, events.SupervisorStoppingEvent):
                events.subscribe(kind, forwarder.on_event)
        return forwarder, ""
    except (ConfigError, OSError, zmq.ZMQError, ImportError, AttributeError) as e:
        return None, f"process events not forwarded: {type(e).__name__}: {e}"
