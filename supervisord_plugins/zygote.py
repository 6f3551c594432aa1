"""supervisord as a zygote: the agent's workers forked from a pre-imported supervisord, not exec'd.

Why: supervisord starts each program with fork() then execve(), and execve
throws the address space away, so five workers each build their own
interpreter and import zmq, ujson, tomllib, the ``common`` package... again,
privately. Forked without the execve, a worker shares every page it inherits
(the interpreter's start-up heap, the pre-imported modules) with supervisord
and its siblings until one of them writes to it: -11 to -14 MiB PSS for the
whole agent (docs/footprint.md).

How: supervisord calls the factory of every ``[rpcinterface:x]`` section once
at start (and again at each ``reload``), inside its own process, before it
spawns anything -- its documented extension point. ``make_rpcinterface``
pre-imports ``PRELOAD`` there and wraps the ``execve`` of supervisord's options
object: when a program's executable is one of this package's console scripts
run by this very interpreter, the already-forked child runs that script's
``main()`` in place (``_run_in_child``) instead of exec'ing it. The child is
still the process supervisord forked, prepared exactly as for an exec (own
process group, stdin/stdout/stderr on supervisord's pipes, other descriptors
closed, uid, cwd, umask, environment), so supervisorctl status / stop /
start / restart / signal, autorestart, stopasgroup and the program's logs work
unchanged, and a crash stays inside its own process.

What it relies on that supervisor does not document: that ``_spawn_as_child``
(supervisor/process.py) calls ``options.execve(filename, argv, env)`` in the
child as its last step. Everything else degrades to the ordinary exec: if a
supervisor upgrade stops calling ``options.execve``, nothing is forked in
place and the workers are exec'd as without this module (more memory, same
behaviour; ``tests/supervisord_plugins/test_zygote.py`` fails so it is noticed). The child also
falls back to exec when a pre-imported module's file changed since supervisord
loaded it (an upgrade in place): a restarted worker never runs stale code.

Costs, documented in docs/footprint.md: every worker runs with supervisord's
interpreter flags (``-O``, ``PYTHON*`` variables and ``MALLOC_*`` variables
are those supervisord started with; a program's ``environment=`` still sets
``os.environ``); ``ps`` shows supervisord's command line for every worker
(the name is in ``comm``: ``ps -o pid,comm``; ``supervisorctl status`` has
the PIDs).
"""
from __future__ import annotations

import gc
import importlib
import io
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from common.proven import why_not
from supervisord_plugins import wake

if TYPE_CHECKING:
    from supervisord_plugins import process_events

# Packages whose console scripts may run in place: those of the programs in supervisord.conf, nothing else.
OWN_PACKAGES = ("watcher", "executor", "verifier", "spool", "supervisord_plugins")

# Imported once in supervisord and shared by every forked worker: what at least two
# workers import anyway (tests/repo/test_import_sets.py keeps the per-process sets honest).
# Only what several workers share pays: a module one worker uses costs the same pages
# imported there, and preloaded each page that worker writes is held twice (measured,
# docs/footprint.md: preloading every worker's code and nats-py added 1.3-3.6 MiB).
PRELOAD = (
    "zmq", "ujson", "tomllib", "socket", "signal", "dataclasses", "subprocess", "heapq",
    "common.config", "common.events", "common.fsutil", "common.ipc", "common.log", "common.loop",
    "common.notice", "common.contract", "common.runtime", "common.timefmt", "common.http",
    "common.state_file", "common.wire",
)

# The console script pip writes: "from spool.__main__ import main".
_ENTRY = re.compile(rb"^from ([A-Za-z_][\w.]*) import ([A-Za-z_]\w*)\s*$", re.MULTILINE)
_MAX_SCRIPT = 4096
# supervisord's stream objects, kept referenced in a worker (see _std_streams).
_PARENT_STREAMS: list[Any] = []
# File -> st_mtime_ns of every module the preload imported, when it imported it.
_PRELOADED: dict[str, int] = {}
# supervisord's own handlers (supervisor/options.py setsignals) must not reach a worker.
_RESET = (signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2)
# Stop signals a worker must not lose in the instant between supervisord's fork and the reset above.
_STOPS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGQUIT})


class Zygote:
    """The XML-RPC namespace supervisord exposes for it (``zygote.getState``): what it preloaded."""

    def __init__(self, preloaded: dict[str, int], error: str,
                 forwarder: process_events.Forwarder | None = None, events_error: str = "") -> None:
        self.preloaded = preloaded
        self.error = error
        self.forwarder = forwarder
        self.events_error = events_error
        self.waker: wake.Waker | None = None
        self.wake_error = ""

    def getState(self) -> dict[str, Any]:  # camelCase: the XML-RPC convention supervisor uses
        events = self.forwarder.state() if self.forwarder is not None else {}
        return {"installed": not self.error, "error": self.error, "modules": len(self.preloaded),
                "python": sys.executable, "events": events, "events_error": self.events_error,
                "wakes": self.waker.pokes if self.waker is not None else 0, "wake_error": self.wake_error}


def make_rpcinterface(supervisord: Any, packages: str = "", preload: str = "", config: str = "",
                      events: str = "on", **extra: str) -> Zygote:
    """The ``supervisor.rpcinterface_factory`` of ``[rpcinterface:zygote]``.

    Optional keys of that section (supervisord passes them here): ``packages``, the
    top-level packages whose console scripts run in place (default ``OWN_PACKAGES``);
    ``preload``, more modules to pre-import after ``PRELOAD``, both space-separated;
    ``config``, the agent configuration the process events are forwarded with (default
    ``$SCO_AGENT_CONFIG``); ``events = off`` to forward none (supervisord_plugins/process_events.py).
    """
    # The preload first: it records the files of what it imports (the stale-module check),
    # and the event forwarder imports some of the same modules.
    # The launcher's stand-ins stepped aside at start if supervisor or CPython is not the tested one
    # (common/proven.py); said here, where supervisord's log is.
    launch_reason = why_not("supervisord_plugins.launch")
    if launch_reason:
        _say(supervisord, launch_reason)
    zygote = _make_zygote(supervisord, packages, preload)
    if zygote.error:
        _say(supervisord, zygote.error)
    if events != "off":
        try:
            forwarding = importlib.import_module("supervisord_plugins.process_events")
            zygote.forwarder, zygote.events_error = forwarding.install(supervisord, config)
        except Exception as e:  # noqa: BLE001 -- an error here would stop supervisord from starting
            zygote.events_error = f"process events not forwarded: {type(e).__name__}: {e}"
        if zygote.events_error:
            _say(supervisord, zygote.events_error)
    # Signals wake supervisord's loop, so an exited worker is reaped at once, not at the next
    # 1 s poll (supervisord_plugins/wake.py).
    zygote.waker, zygote.wake_error = wake.install(supervisord)
    if zygote.wake_error:
        _say(supervisord, zygote.wake_error)
    return zygote


def _say(supervisord: Any, message: str) -> None:
    logger = getattr(getattr(supervisord, "options", None), "logger", None)
    if logger is not None:
        logger.warn(f"zygote: {message}")  # noqa: G010 -- supervisor's Logger has warn(), not warning()


def _make_zygote(supervisord: Any, packages: str, preload: str) -> Zygote:
    # Forking in place relies on supervisor calling options.execve and on CPython's fork: only
    # with the supervisor and CPython it was tested with (common/proven.py); else workers are
    # exec'd as supervisor does, and nothing is preloaded (it would only weigh on supervisord).
    reason = why_not("supervisord_plugins.zygote")
    if reason:
        return Zygote({}, reason)
    own = tuple(packages.split()) or OWN_PACKAGES
    try:
        before = set(sys.modules)
        for name in (*PRELOAD, *preload.split()):
            importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 -- an error here would stop supervisord from starting
        # Preloading is an optimisation: without it workers are exec'd as usual.
        return Zygote({}, f"preload failed: {type(e).__name__}: {e}")
    # Kept across `supervisorctl reload` (which calls this again, modules already loaded):
    # the times are those of the files as they were first imported.
    for path, mtime in _files(set(sys.modules) - before).items():
        _PRELOADED.setdefault(path, mtime)
    preloaded = _PRELOADED
    options = supervisord.options
    execve = getattr(options, "execve", None)
    if not callable(execve):
        return Zygote(preloaded, "supervisor has no options.execve: workers are exec'd")
    original = getattr(execve, "zygote_original", execve)

    def zygote_execve(filename: str, argv: list[str], env: dict[str, str]) -> Any:
        receiver = getattr(options, "signal_receiver", None)
        entry = entry_point(filename, own)
        if entry is not None and not _changed(preloaded):
            _run_in_child(entry, filename, argv, env, receiver)   # never returns
        # Exec'd: the stop signals the fork held (born_holding_stops) are let in first, under their
        # defaults -- one sent meanwhile ends this child before the exec, as it was meant to.
        take_stops(receiver)
        return original(filename, argv, env)

    # A mark on the function itself, so installing twice wraps supervisor's execve, not ours.
    zygote_execve.zygote_original = original  # type: ignore[attr-defined]  # functions take attributes
    options.execve = zygote_execve
    fork = getattr(options, "fork", None)
    if callable(fork):
        options.fork = born_holding_stops(getattr(fork, "zygote_original", fork))
    # Objects that exist now live as long as supervisord: keep the collector off them, so
    # neither supervisord's nor a worker's collections write to (and so un-share) their pages.
    gc.freeze()
    return Zygote(preloaded, "")


def entry_point(filename: str, packages: tuple[str, ...] = OWN_PACKAGES,
                python: str | None = None) -> tuple[str, str] | None:
    """(module, function) if ``filename`` is one of our console scripts for this interpreter, else None."""
    try:
        with open(filename, "rb") as f:
            head = f.read(_MAX_SCRIPT)
    except OSError:
        return None
    first, _, rest = head.partition(b"\n")
    interpreter = first[2:].strip().decode("utf-8", "replace") if first.startswith(b"#!") else ""
    if not same_interpreter(interpreter, python or sys.executable):
        return None   # another interpreter or virtualenv: only an exec runs it faithfully
    m = _ENTRY.search(rest)
    if m is None:
        return None
    module, func = m.group(1).decode(), m.group(2).decode()
    if module.split(".")[0] not in packages:
        return None
    return module, func


def same_interpreter(a: str, b: str) -> bool:
    """Whether two interpreter paths run the same interpreter in the same virtualenv: the same
    directory (a venv's bin/, which its pyvenv.cfg belongs to) and the same binary -- ``python``
    and ``python3`` in one venv are (pip writes either into a script's #! line; supervisord may be
    started through the other, supervisord_plugins/launch.py)."""
    if a == b:
        return True
    if not a or not b or os.path.dirname(a) != os.path.dirname(b):
        return False
    return os.path.realpath(a) == os.path.realpath(b)


def _files(names: set[str]) -> dict[str, int]:
    out = {}
    for name in names:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            try:
                out[path] = os.stat(path).st_mtime_ns
            except OSError:
                pass
    return out


def _changed(preloaded: dict[str, int]) -> bool:
    for path, mtime in preloaded.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return True
        except OSError:
            return True
    return False


def _std_streams() -> None:
    """Fresh sys.stdin/stdout/stderr on fds 0-2 (now supervisord's pipes), built as CPython builds them.

    supervisord's own stream objects are kept referenced and never flushed: what they
    buffered is supervisord's output, not the worker's (and finalizing them would write it).
    """
    # -u / PYTHONUNBUFFERED as supervisord's interpreter started (sys.flags does not say).
    unbuffered = bool(getattr(sys.stdout, "write_through", False))
    for name, fd in (("stdin", 0), ("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        _PARENT_STREAMS.append(old)
        write = fd != 0
        raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
        if write:
            buf: Any = raw if unbuffered else io.BufferedWriter(raw)
        else:
            buf = io.BufferedReader(raw)
        stream = io.TextIOWrapper(buf, encoding=getattr(old, "encoding", None) or "utf-8",
                                  errors=getattr(old, "errors", None) or "strict",
                                  line_buffering=write and (fd == 2 or raw.isatty()),
                                  write_through=write and unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _join_threads() -> None:
    """What interpreter shutdown does after main() returns: wait for non-daemon threads."""
    threading = sys.modules.get("threading")
    if threading is None:
        return
    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon:
            t.join()


def caught_for_supervisord(receiver: Any) -> list[int]:
    """The stop signals supervisord's handler recorded in this child: its SignalReceiver, inherited
    by the fork, takes what lands before the reset and keeps it where only supervisord looks."""
    return [s for s in list(getattr(receiver, "_signals_recvd", None) or []) if s in _STOPS]


def born_holding_stops(fork: Callable[[], int]) -> Callable[[], int]:
    """supervisord's ``options.fork``, with the child born holding the stop signals.

    Why: a signal that reaches a forked child before CPython's own after-fork code has run in it
    trips supervisord's handler (the child's copy) and is then wiped: ``PyOS_AfterFork_Child``
    clears every tripped signal (Modules/signalmodule.c ``_PySignal_AfterFork``, issue9535). On a
    loaded machine a child can wait that long to run at all, and a unit stop's SIGTERM, sent to
    every process of the unit at once, was lost so: the worker started as if nothing had been
    said and was SIGKILLed when the stop timed out (tests/chaos/test_unit_restarts.py;
    ``python -m bench.unit_stops`` counts it, docs/footprint.md). Held from before the fork, a stop
    signal stays pending in the kernel until the child lets it in under its own disposition
    (``take_stops``: the zygote's worker, or the exec). The parent lets them in at once.
    """
    def fork_holding_stops() -> int:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        pid = -1
        try:
            pid = fork()
        finally:
            if pid != 0:   # supervisord (or a failed fork): as it was
                signal.pthread_sigmask(signal.SIG_SETMASK, before)
        return pid

    fork_holding_stops.zygote_original = fork  # type: ignore[attr-defined]  # functions take attributes
    return fork_holding_stops


def take_stops(receiver: Any = None) -> None:
    """In supervisord's child: the stop signals back to their defaults, then let in (``born_holding_stops``).

    A SIGTERM that came before the reset went to supervisord's handler and would be lost: the
    worker would run on, and a unit stop would wait out its timeout (tests/chaos, unit restarts).
    So: hold stop signals (held already when the fork did), reset, raise again what supervisord's
    handler took, let them in. (One meant for supervisord itself, pending when it forked, stops a
    worker it is about to stop.)"""
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    for sig in _RESET:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for caught in caught_for_supervisord(receiver):
        os.kill(os.getpid(), caught)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)


def _run_in_child(entry: tuple[str, str], filename: str, argv: list[str], env: dict[str, str],
                  receiver: Any = None) -> None:
    """Become the worker: this runs in the child supervisord forked and never returns into supervisord."""
    code: Any = 1
    try:
        gc.freeze()   # inherited objects: never collected here (they are supervisord's) nor touched
        take_stops(receiver)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [filename, *argv[1:]]   # as the interpreter sets it for a script
        _std_streams()
        name = os.path.basename(argv[0])[:15]
        try:
            with open("/proc/self/comm", "w") as f:
                f.write(name)   # `ps -o comm`, top: the program's name instead of supervisord's
        except OSError:
            pass
        module, func = entry
        code = getattr(importlib.import_module(module), func)()
        _join_threads()
    except SystemExit as e:
        code = e.code
    except BaseException:  # noqa: BLE001 -- the worker died; report it like an interpreter would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        # Never back into supervisord's code (nor its atexit handlers): leave here.
        os._exit(code & 0xFF)
