"""supervisord's process events reach the spool from inside supervisord (supervisord_plugins/process_events.py).

The mapping on its own, then a real supervisord (this venv's, the version setup.cfg pins)
with the zygote plugin and its event forwarding: a SIGKILLed worker becomes
``agent.process_exited`` in a (fake) spool and is restarted; a program that never starts
becomes FATAL; with the spool down supervisord keeps answering and restarting, and the
events arrive once the spool is back.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import xmlrpc.client

import pytest

from common import ipc
from common.config import build
from common.log import Logger
from supervisord_plugins import process_events
from supervisord_plugins.process_events import Forwarder, event_data
from tests.supervisord_plugins.test_zygote import HEAD, write_script
from tests.support.agent_rig import REPO, supervisord_command, waking, write_config
from tests.support.fake_spool import FakeSpool
from tests.support.procutil import stop_pid
from tests.support.wait import wait_for


def test_exit_and_fatal_are_recorded_and_nothing_else():
    assert event_data("PROCESS_STATE_EXITED",
                      "processname:executor groupname:executor from_state:RUNNING expected:0 pid:2766") == {
        "program": "executor", "group": "executor", "state": "EXITED", "from_state": "RUNNING",
        "expected": False, "pid": 2766}
    assert event_data("PROCESS_STATE_FATAL", "processname:spool groupname:spool from_state:BACKOFF") == {
        "program": "spool", "group": "spool", "state": "FATAL", "from_state": "BACKOFF"}
    assert event_data("PROCESS_STATE_RUNNING", "processname:executor groupname:executor pid:2799") is None
    assert event_data("PROCESS_STATE_EXITED", "processname:w groupname:w expected:1 pid:9")["expected"] is True
    assert event_data("PROCESS_STATE_EXITED", "processname:w pid:\u00b2")["pid"] is None


def test_an_error_is_counted_never_raised_into_supervisord(tmp_path):
    from supervisor import events

    class Proc:                 # a process whose payload cannot be rendered
        pid = 7
        group = None
        config = None

    lines: list[str] = []
    log = Logger("supervisord", stream=process_events.SupervisorLogStream(
        type("L", (), {"info": staticmethod(lines.append)})()))
    fwd = Forwarder(build({"paths": {"runtime_dir": str(tmp_path), "state_dir": str(tmp_path)}}), log)
    event = events.ProcessStateExitedEvent.__new__(events.ProcessStateExitedEvent)
    event.process, event.from_state, event.expected, event.extra_values = Proc(), 20, False, []
    fwd.on_event(event)
    assert fwd.errors == 1 and fwd.forwarded == 0 and fwd.link is None
    assert any("process_events.error" in line and "AttributeError" in line for line in lines)


def test_a_bad_configuration_leaves_supervisord_running_without_forwarding(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text("[node\n")
    forwarder, error = process_events.install(object(), str(path))
    assert forwarder is None and "not valid TOML" in error


CONF = HEAD + """
[program:worker]
command={d}/bin/probe-worker
startsecs=0
autorestart=true
stdout_logfile={d}/worker.out
stderr_logfile={d}/worker.err
[program:doomed]
command={python} -c "import sys; sys.exit(4)"
autostart=false
startsecs=5
startretries=0
"""


class Rig:
    """supervisord with the zygote and its event forwarding, a probe worker, a fake spool to start."""

    def __init__(self, d: str) -> None:
        self.d = d
        self.run_dir = os.path.join(d, "run")
        ipc.ensure_runtime_dir(self.run_dir)
        self.spool: FakeSpool | None = None
        config = os.path.join(d, "agent.toml")
        write_config(config, {"node": {"name": "node-a", "hall": "h1", "scheduler": "none"},
                              "paths": {"runtime_dir": self.run_dir, "state_dir": os.path.join(d, "state")}})
        os.makedirs(os.path.join(d, "bin"))
        write_script(os.path.join(d, "bin", "probe-worker"), sys.executable)
        self.conf = os.path.join(d, "supervisord.conf")
        with open(self.conf, "w") as f:
            f.write(CONF.format(d=d, zygote=f"config = {config}", python=sys.executable))
        self.env = dict(os.environ, PYTHONPATH=REPO)
        self.proc = subprocess.Popen([*supervisord_command(), "-c", self.conf],
                                     env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def start_spool(self) -> FakeSpool:
        self.spool = FakeSpool(self.run_dir).start()
        return self.spool

    def rpc(self) -> xmlrpc.client.ServerProxy:
        from supervisor.xmlrpc import SupervisorTransport

        return xmlrpc.client.ServerProxy("http://localhost",
                                         transport=SupervisorTransport(None, None, f"unix://{self.d}/sup.sock"))

    def running(self, not_pid: int = 0) -> int:
        def check() -> int:
            info = self.rpc().supervisor.getProcessInfo("worker")
            return info["pid"] if info["statename"] == "RUNNING" and info["pid"] != not_pid else 0
        return wait_for(check, 30, "worker RUNNING")

    def stop(self) -> None:
        with waking(os.path.join(self.d, "sup.sock")):   # its reaps without a 1 s wait each
            stop_pid(self.proc.pid, "supervisord", timeout=30)
            self.proc.wait(30)
        if self.spool is not None:
            self.spool.stop()


@pytest.fixture
def rig(tmp_path):
    r = Rig(str(tmp_path))
    yield r
    r.stop()


def exits(spool: FakeSpool, state: str = "EXITED") -> list[dict]:
    return [e for e in spool.of_type("agent.process_exited") if e["data"]["state"] == state]


def test_a_killed_worker_is_recorded_in_the_spool_and_restarted(rig):
    spool = rig.start_spool()
    pid = rig.running()
    os.kill(pid, signal.SIGKILL)
    new = rig.running(not_pid=pid)          # supervisord restarted it
    assert new != pid
    ev = wait_for(lambda: exits(spool), 20, "the crash recorded in the spool")[0]
    assert ev["data"] == {"program": "worker", "group": "worker", "state": "EXITED", "from_state": "RUNNING",
                          "expected": False, "pid": pid}
    assert ev["source"].startswith("supervisord-") and ev["node"] == "node-a" and ev["hall"] == "h1"
    # A program that cannot start at all: FATAL, also recorded.
    rig.rpc().supervisor.startProcess("doomed", False)
    fatal = wait_for(lambda: exits(spool, "FATAL"), 20, "FATAL recorded")[0]
    assert fatal["data"]["program"] == "doomed"
    # Acknowledged: nothing left pending in supervisord (acks are read on its 5 s tick).
    wait_for(lambda: rig.rpc().zygote.getState()["events"]["pending"] == 0, 20, "acks read")
    state = rig.rpc().zygote.getState()["events"]
    assert state["forwarded"] >= 2 and state["errors"] == 0 and state["dropped"] == 0


def test_with_the_spool_down_supervisord_keeps_working_and_delivers_later(rig):
    pid = rig.running()
    for _ in range(3):                      # three crashes with nobody listening
        os.kill(pid, signal.SIGKILL)
        pid = rig.running(not_pid=pid)
    state = rig.rpc().zygote.getState()["events"]
    assert state["forwarded"] == 3 and state["pending"] == 3 and state["errors"] == 0
    assert rig.proc.poll() is None
    # A spool that reads but never acknowledges (up = False) blocks nothing either.
    spool = rig.start_spool()
    spool.up = False
    wait_for(lambda: spool.received == 0 and rig.rpc().supervisor.getState()["statename"] == "RUNNING", 10,
             "supervisord answering")
    os.kill(pid, signal.SIGKILL)
    pid = rig.running(not_pid=pid)
    spool.up = True
    # Resent on supervisord's tick until acknowledged: all four, once each.
    wait_for(lambda: len(exits(spool)) == 4, 30, lambda: f"4 exits, have {len(exits(spool))}")
    wait_for(lambda: rig.rpc().zygote.getState()["events"]["pending"] == 0, 20, "all acknowledged")
    assert rig.proc.poll() is None


def test_a_reload_closes_the_link_in_time_and_forwarding_resumes(rig):
    """`reload` closes every descriptor from 5 up (supervisor's cleanup_fds): the zmq context must be
    gone by then (libzmq aborts on a closed epoll descriptor) and a new one opened afterwards."""
    spool = rig.start_spool()
    pid = rig.running()
    os.kill(pid, signal.SIGKILL)
    pid = rig.running(not_pid=pid)
    wait_for(lambda: exits(spool), 20, "the first crash recorded")
    rig.rpc().supervisor.restart()
    pid = rig.running(not_pid=pid)
    os.kill(pid, signal.SIGKILL)
    rig.running(not_pid=pid)
    ev = wait_for(lambda: [e for e in exits(spool) if e["data"]["pid"] == pid], 20, "the crash after the reload")
    assert len(exits(spool)) == 2 and ev[0]["data"]["expected"] is False
    assert rig.proc.poll() is None
