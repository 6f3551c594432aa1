"""supervisord_plugins.wake: a signal wakes supervisord's loop, and a stale descriptor is never written.

In process against supervisor's own SignalReceiver, then under a real supervisord at
``loglevel=blather``, whose loop logs the dispatcher behind every read event it handles
(supervisor/supervisord.py ``runforever``: "read event caused by %(dispatcher)r"): a worker's
exit must show the wake pipe's read event, in the first run and after a ``reload``.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import types
import xmlrpc.client
from typing import Any

import pytest
from supervisor.options import SignalReceiver
from supervisor.xmlrpc import SupervisorTransport

from supervisord_plugins import wake
from tests.supervisord_plugins.test_zygote import CONF, Supervisor, write_script
from tests.support.wait import wait_for

WAKE_LINE = "read event caused by <sco-agent wake pipe>"


@pytest.fixture(autouse=True)
def fresh_module_state():
    saved = list(wake._WAKERS)
    wake._WAKERS.clear()
    yield
    for w in wake._WAKERS:
        w.close()
    wake._WAKERS[:] = saved


def run_of_supervisord(socket_map: dict[int, Any]) -> Any:
    """What install() reads of a run of supervisord: a new ServerOptions (and receiver) per run."""
    options = types.SimpleNamespace(signal_receiver=SignalReceiver(), get_socket_map=lambda: socket_map)
    return types.SimpleNamespace(options=options)


def readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_a_signal_is_recorded_as_before_and_makes_the_pipe_readable():
    socket_map: dict[int, Any] = {}
    sup = run_of_supervisord(socket_map)
    waker, error = wake.install(sup)
    assert error == "" and waker is not None and socket_map == {waker.r: waker}
    sup.options.signal_receiver.receive(signal.SIGCHLD, None)
    assert sup.options.signal_receiver.get_signal() == signal.SIGCHLD   # supervisord's record, unchanged
    assert readable(waker.r, 10)
    waker.handle_read_event()
    assert not readable(waker.r, 0)
    assert waker.readable() and not waker.writable()


def test_a_second_call_in_one_run_keeps_the_first_waker():
    socket_map: dict[int, Any] = {}
    sup = run_of_supervisord(socket_map)
    first, _ = wake.install(sup)
    second, _ = wake.install(sup)     # make_http_servers calls the factory once per server
    assert first is second and len(socket_map) == 1
    sup.options.signal_receiver.receive(signal.SIGHUP, None)
    assert sup.options.signal_receiver._signals_recvd == [signal.SIGHUP]   # recorded once, not twice


def test_after_a_reload_closed_the_pipe_a_reused_descriptor_is_never_written_nor_closed(tmp_path):
    socket_map: dict[int, Any] = {}
    old_run = run_of_supervisord(socket_map)
    old, _ = wake.install(old_run)
    assert old is not None
    old_receive = old_run.options.signal_receiver.receive
    # supervisord's reload: options.cleanup_fds closes every descriptor from 5 up...
    os.close(old.r)
    os.close(old.w)
    # ...and the numbers are taken again by the next run's files.
    files = [os.open(tmp_path / f"reused{i}", os.O_RDWR | os.O_CREAT) for i in range(2)]
    try:
        assert {old.r, old.w} <= set(files)
        old_receive(signal.SIGCHLD, None)          # the old handler, still installed until setsignals
        new_run = run_of_supervisord(socket_map)
        new, error = wake.install(new_run)
        assert error == "" and new is not None and new is not old
        assert socket_map == {new.r: new}
        for fd in files:
            assert os.fstat(fd).st_size == 0        # not written into
            os.fstat(fd)                            # not closed by the old waker
        new_run.options.signal_receiver.receive(signal.SIGCHLD, None)
        assert readable(new.r, 10)
    finally:
        for fd in files:
            os.close(fd)


def test_an_options_object_without_a_receiver_is_an_error_not_a_crash():
    waker, error = wake.install(types.SimpleNamespace(options=object()))
    assert waker is None and "signals do not wake supervisord's loop" in error


@pytest.fixture
def blather_sup(tmp_path):
    d = str(tmp_path)
    os.makedirs(os.path.join(d, "bin"))
    os.makedirs(os.path.join(d, "lib"))
    for name in ("probe-a", "probe-b", "probe-other"):
        write_script(os.path.join(d, "bin", name), sys.executable)
    conf = CONF.format(d=d, zygote="").replace("nodaemon=true", "nodaemon=true\nloglevel=blather")
    with open(os.path.join(d, "supervisord.conf"), "w") as f:
        f.write(conf)
    s = Supervisor(d)
    yield s
    s.stop()


def zygote_state(s: Supervisor) -> dict[str, Any]:
    proxy = xmlrpc.client.ServerProxy("http://localhost", transport=SupervisorTransport(
        None, None, f"unix://{s.d}/sup.sock"))
    return proxy.zygote.getState()


def test_a_worker_exit_wakes_the_real_supervisords_loop_before_and_after_a_reload(blather_sup):
    s = blather_sup
    for round_ in ("first run", "after reload"):
        pid = s.running("a")
        seen = s.log("supervisord.log").count(WAKE_LINE)
        os.kill(pid, signal.SIGKILL)
        s.running("a", not_pid=pid)          # restarted
        wait_for(lambda seen=seen: s.log("supervisord.log").count(WAKE_LINE) > seen, 30,
                 f"the wake pipe's read event ({round_})")
        state = zygote_state(s)
        assert state["wake_error"] == "" and state["wakes"] > 0, state
        # the forked worker does not carry supervisord's handler (the zygote resets SIGCHLD)
        assert s.report("a", s.running("a"))["sigchld_default"] is True
        if round_ == "first run":
            for program in ("a", "b", "other"):
                s.running(program)
            pipes_before = _pipes(s.proc.pid)
            offset = len(s.log("supervisord.log"))
            s.ctl("reload")
            wait_for(lambda offset=offset: "supervisord started" in s.log("supervisord.log")[offset:], 30,
                     "supervisord reloaded")
    for program in ("a", "b", "other"):
        s.running(program)
    # No pipe left behind by the reload (the wake pipe is one): its pipes, with the same three
    # programs running, at most as many as before it. Pipes only: supervisorctl's channels (unix
    # sockets) close a moment after each call, and a log file may be opened on a program's first
    # output -- a whole-descriptor count moved with both under load (two CI runs failed on it).
    wait_for(lambda: _pipes(s.proc.pid) <= pipes_before, 30,
             lambda: f"supervisord's pipes back to {pipes_before} or fewer (now {_pipes(s.proc.pid)})")


def _pipes(pid: int) -> int:
    """How many of ``pid``'s descriptors are pipes (one closed while counted is not)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:")
        except FileNotFoundError:
            pass
    return count
