"""The supervisord event listener: protocol on stdout only, exits recorded for the spool."""
from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import threading

import pytest
import zmq

from common import ipc
from supervisord_plugins.listener import OK, ProtocolError, handle
from tests.agent_rig import REPO, write_config
from tests.procutil import stop_pid, venv_tool, wait_for


def frame(eventname: str, payload: str) -> str:
    body = payload.encode()
    return (f"ver:3.0 server:supervisor serial:21 pool:sco-listener poolserial:10 "
            f"eventname:{eventname} len:{len(body)}\n{payload}")


def run(*events: str) -> tuple[str, list[tuple[str, dict]]]:
    stdin, stdout, seen = io.StringIO("".join(events)), io.StringIO(), []
    while handle(stdin, stdout, lambda t, d: seen.append((t, d))):
        pass
    return stdout.getvalue(), seen


def test_exit_and_fatal_are_recorded_and_every_event_acked():
    out, seen = run(
        frame("PROCESS_STATE_EXITED", "processname:executor groupname:executor from_state:RUNNING expected:0 pid:2766"),
        frame("PROCESS_STATE_RUNNING", "processname:executor groupname:executor from_state:STARTING pid:2799"),
        frame("PROCESS_STATE_FATAL", "processname:spool groupname:spool from_state:BACKOFF"),
    )
    assert out == OK * 3          # stdout carries the protocol and nothing else
    assert seen == [
        ("agent.process_exited", {"program": "executor", "group": "executor", "state": "EXITED",
                                  "from_state": "RUNNING", "expected": False, "pid": 2766}),
        ("agent.process_exited", {"program": "spool", "group": "spool", "state": "FATAL",
                                  "from_state": "BACKOFF"}),
    ]


def test_expected_exit_is_marked_expected():
    _, seen = run(frame("PROCESS_STATE_EXITED", "processname:w groupname:w from_state:RUNNING expected:1 pid:9"))
    assert seen[0][1]["expected"] is True


def test_payload_length_counts_bytes_on_the_real_binary_pipe():
    payload = "processname:caf\u00e9 groupname:g from_state:RUNNING expected:0 pid:1"
    stdin, stdout, seen = io.BytesIO(frame("PROCESS_STATE_EXITED", payload).encode() * 2), io.StringIO(), []
    while handle(stdin, stdout, lambda t, d: seen.append(d)):
        pass
    assert [d["program"] for d in seen] == ["caf\u00e9", "caf\u00e9"]


def test_garbage_header_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        handle(io.StringIO("hello world\n"), io.StringIO(), lambda t, d: None)
    with pytest.raises(ProtocolError):
        handle(io.StringIO("len:-5\n"), io.StringIO(), lambda t, d: None)


def test_end_of_input_stops():
    assert handle(io.StringIO(""), io.StringIO(), lambda t, d: None) is False


class FakeSpool:
    """A spool ROUTER that acknowledges and keeps every event."""

    def __init__(self, run_dir: str) -> None:
        self.events: list[dict] = []
        self.run_dir = run_dir
        self._stop = threading.Event()
        self._up = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        self._up.wait(5)

    def _run(self) -> None:
        ctx = zmq.Context()
        sock = ipc.bind(ctx, zmq.ROUTER, self.run_dir, ipc.SPOOL_INTAKE)
        self._up.set()
        while not self._stop.is_set():
            if sock.poll(50):
                ident, *frames = sock.recv_multipart()
                _, ev = ipc.decode(frames)
                self.events.append(ev)
                sock.send_multipart([ident, *ipc.encode(ipc.T_ACK, {"ids": [ev["event_id"]]})])
        ctx.destroy(linger=0)

    def close(self) -> None:
        self._stop.set()
        self._t.join(5)


def test_under_a_real_supervisord_a_crash_reaches_the_spool(tmp_path):
    run_dir = str(tmp_path / "run")
    ipc.ensure_runtime_dir(run_dir)
    spool = FakeSpool(run_dir)
    config = str(tmp_path / "agent.toml")
    write_config(config, {"node": {"name": "node-a", "scheduler": "none"},
                          "paths": {"runtime_dir": run_dir, "state_dir": str(tmp_path / "state")}})
    conf = tmp_path / "supervisord.conf"
    conf.write_text(textwrap.dedent(f"""
        [unix_http_server]
        file={tmp_path}/supervisor.sock
        [supervisord]
        nodaemon=true
        logfile={tmp_path}/supervisord.log
        pidfile={tmp_path}/supervisord.pid
        [rpcinterface:supervisor]
        supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
        [supervisorctl]
        serverurl=unix://{tmp_path}/supervisor.sock
        [eventlistener:sco-listener]
        command={sys.executable} -m supervisord_plugins.listener --config {config}
        directory={REPO}
        environment=PYTHONPATH="{REPO}"
        events=PROCESS_STATE_EXITED,PROCESS_STATE_FATAL
        stderr_logfile={tmp_path}/listener.log
        [program:crasher]
        command={sys.executable} -c "import sys, time; time.sleep(1.5); sys.exit(3)"
        autorestart=false
        startsecs=1
    """))
    supervisord = venv_tool("supervisord")
    proc = subprocess.Popen([supervisord, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        ev = wait_for(lambda: [e for e in spool.events if e["type"] == "agent.process_exited"], 20,
                      "the crash recorded in the spool")[0]
        assert ev["data"]["program"] == "crasher" and ev["data"]["state"] == "EXITED"
        assert ev["data"]["expected"] is False and ev["data"]["pid"] > 0
        assert ev["source"].startswith("listener")
    finally:
        stop_pid(proc.pid, "supervisord", timeout=20)
        proc.wait(20)
        spool.close()
