"""What the drain core asks of a scheduler, and how a scheduler answers: one Protocol, one Report vocabulary.

On every turn of the executor's loop the core (``executor.drain``) hands the
scheduler the ``Order`` of the node's one drain -- that of the governing notice
(``executor.governing``); a new notice id in it means another notice took the
drain over, and the scheduler stops whatever it ran for the previous one -- and
a ``Withdrawal`` for each withdrawn notice. The scheduler does the work on its own threads -- its calls
block (HTTP to the API server, Slurm's command-line tools, subprocesses) -- and
answers with ``Report`` values that the loop collects when ``fileno()`` is
readable. Every method returns at once: the loop never waits on a scheduler.

A scheduler knows nothing of notice kinds or policies: the core decides, and the
order says what to do (``cordon_only``), by when (``ends``) and how far the
verifier has escalated (``level``). Its own memory across restarts (pods evicted,
jobs signalled) lives in the drain record's ``memo``, which it asks the core to
persist with ``Remember``.

A scheduler is one sub-package of executor/, named in ``SCHEDULERS`` and imported
only on a node that runs it (a Kubernetes node never imports the Slurm code). Its
module has ``build(config, log) -> Scheduler | None`` and ``memo_problem(memo) -> str``.
"""
from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol

from common.contract import BUILTIN, Contract
from common.events import EventType
from common.wire import Budget, PhaseEnds

if TYPE_CHECKING:
    from common.config import Config
    from common.log import Logger

# node.scheduler -> the module of its sub-package that builds it.
SCHEDULERS = {"kubernetes": "executor.kube.scheduler", "slurm": "executor.slurm.scheduler"}


@dataclass(frozen=True, slots=True)
class Order:
    """One running drain, as the core hands it over on every turn (plain data, read-only)."""

    notice_id: str
    kind: str                    # only a label the scheduler writes on the node (taint value, DRAIN reason)
    deadline: float
    received_at: float
    budget: Budget               # frozen when the drain started
    ends: PhaseEnds              # phase_ends(received_at, deadline, budget)
    cordon_only: bool            # the contract's policy for the kind: stop new work, move nothing
    taint_key: str
    pdb_blocked: str             # delete | report
    exclude_from_lb: bool
    steps_done: frozenset[str] = frozenset()
    memo: Mapping[str, Any] = field(default_factory=dict)   # the scheduler's memory from the record
    level: str | None = None     # the verifier's escalation level (common.wire.LEVELS)
    held: frozenset[str] = frozenset()   # pod UIDs whose agent-socket clients still checkpoint
    hold_all: bool = False               # a client no pod can be told for holds every pod
    held_until: Mapping[str, float] = field(default_factory=dict)   # pod UID -> end of its client's extend grant
    contract: Contract = BUILTIN          # the current one: a scheduler freezes what it needs in its memo
    fallback_allowed: bool = False        # the contract lets this kind go around an unreachable scheduler
    fallback_at: float = float("inf")     # and not before this (common.wire.fallback_at)
    source: str = ""                      # who announced it (common.notice.Notice.source), for the node's condition


@dataclass(frozen=True, slots=True)
class Marker:
    """The notice the node's marks name (the taint value, the annotation): the governing one."""

    notice_id: str
    kind: str
    deadline: float
    source: str = ""


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """A withdrawn notice whose drain is to be stopped -- and what it did to the node undone, unless
    another active notice still wants it (``keep``): then the marks are pointed at ``marker``."""

    notice_id: str
    taint_key: str
    steps_done: frozenset[str] = frozenset()
    memo: Mapping[str, Any] = field(default_factory=dict)
    others_active: bool = False   # another notice still needs the node marked: undo nothing
    keep: frozenset[str] = frozenset()   # those notices (an annotation naming one of them is theirs)
    marker: Marker | None = None         # whom the marks name from now on (None: no change)


# -- reports: the one vocabulary every scheduler answers in -----------------------------------

@dataclass(frozen=True, slots=True)
class StepDone:
    """A drain step done: recorded in the record's steps; announced as ``event`` if one is named."""

    notice_id: str
    step: str
    event: EventType | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Announce:
    """Something that happened (``event`` is a common.events type): logged and spooled, not recorded."""

    notice_id: str
    event: EventType
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Remaining:
    """What still keeps the node from empty (pods, jobs, a node state); [] means empty."""

    notice_id: str
    items: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class InPhase:
    """The step in progress (common.wire.Phase), which the verifier blames on an overrun."""

    notice_id: str
    phase: str


@dataclass(frozen=True, slots=True)
class NewState:
    """The drain's new state (common.wire.DrainState): an end state, or withdrawn."""

    notice_id: str
    state: str


@dataclass(frozen=True, slots=True)
class Log:
    """A log line, not an event (only the loop's thread writes the log)."""

    notice_id: str
    name: str
    data: dict[str, Any] = field(default_factory=dict)
    level: str = "warning"


class Saved:
    """The core's answer to a ``Remember`` that waits: set once the save was tried, ``ok`` if the
    record is durably on disk (a state dir that refused it leaves ``ok`` false)."""

    def __init__(self) -> None:
        self._answered = threading.Event()
        self.ok = False

    def set(self, ok: bool = True) -> None:
        self.ok = ok
        self._answered.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once answered (ok or not); False if ``timeout`` passed first."""
        return self._answered.wait(timeout)


@dataclass(frozen=True, slots=True)
class Remember:
    """Persist the scheduler's memory in the record. With ``saved``, the scheduler waits until the
    record is on disk (the core sets it): how "written down before it is done" works off the loop."""

    notice_id: str
    memo: dict[str, Any]
    saved: Saved | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Problem:
    """A configuration error (credentials refused, TLS verification failed): recorded in the
    record's ``problem`` for the verdict, announced as ``drain.config_error`` -- never an outage."""

    notice_id: str
    reason: str


Report = StepDone | Announce | Remaining | InPhase | NewState | Log | Remember | Problem


class Scheduler(Protocol):
    def advance(self, order: Order, now: float) -> None:
        """Keep the drain of ``order`` going; called on every turn with the latest order."""

    def withdraw(self, w: Withdrawal, now: float) -> None:
        """Stop the notice's drain and undo it; called on every turn until the state is withdrawn."""

    def reports(self) -> list[Report]:
        """Everything reported since the last call, in order."""

    def fileno(self) -> int:
        """Readable when there are reports."""

    def close(self) -> None:
        """Stop every thread; no report is made afterwards."""


def build(config: Config, log: Logger) -> Scheduler | None:
    """The node's scheduler; None when there is none (``node.scheduler = "none"``) or it is unusable
    (logged)."""
    name = config.node.scheduler
    if name not in SCHEDULERS:
        return None
    scheduler: Scheduler | None = import_module(SCHEDULERS[name]).build(config, log)
    return scheduler


def memo_problem(name: str) -> Callable[[dict[str, Any]], str] | None:
    """The check of scheduler ``name``'s memory in a drain record (None: nothing to check)."""
    if name not in SCHEDULERS:
        return None
    check: Callable[[dict[str, Any]], str] = import_module(SCHEDULERS[name]).memo_problem
    return check


class ReportQueue:
    """Reports from worker threads to the loop: a queue, and a non-blocking pipe whose read end the
    loop polls, so a report is handled as soon as it is made, not at the next poll timeout."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Report] = queue.Queue()
        self._lock = threading.Lock()   # a put racing close() must never write into a reused fd
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def fileno(self) -> int:
        return self._wake_r

    def put(self, r: Report) -> None:
        """From any thread."""
        self._queue.put(r)
        with self._lock:
            if self._closed:
                return
            try:
                os.write(self._wake_w, b"\0")
            except BlockingIOError:
                pass   # the pipe is full: the loop is awake anyway

    def take(self) -> list[Report]:
        """On the loop's thread: every report so far."""
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)
