"""A slow slurmctld never stalls the executor's loop: workloads are told and events acknowledged meanwhile.

Slurm's tools wait up to ``slurm.command_timeout_s`` for a controller that is
alive but slow (it answers ``scontrol ping``, then nothing else for a while).
The real executor process runs here with stand-in Slurm tools on its PATH that
do exactly that: every call but a ping hangs until the test opens a gate. While
they hang, the agent socket must still tell the workloads about the notice, and
the spool must still get (and acknowledge) the drain's events.
"""
from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path
from types import SimpleNamespace

from tests.procutil import wait_for
from tests.slurm.process import ExecutorHarness

# A controller that answers pings at once and every other call only once the gate file exists.
SLOW_TOOL = """#!/bin/sh
if [ "$1" = "ping" ]; then echo "Slurmctld(primary) at ctl is UP"; exit 0; fi
while [ ! -e "{gate}" ]; do sleep 0.05; done
echo "slurm_load_node error: Socket timed out on send/recv operation" >&2
exit 1
"""
DRAIN = {"budget_s": 100, "checkpoint_s": 30, "evict_s": 30, "margin_s": 10}
SLURM = {"signal": "SIGUSR1", "signal_scope": "batch", "on_drain": "requeue"}


def slow_tools(bin_dir: Path, gate: Path) -> None:
    bin_dir.mkdir()
    for tool in ("scontrol", "squeue", "sinfo", "scancel"):
        path = bin_dir / tool
        path.write_text(SLOW_TOOL.format(gate=gate))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


def lines(sock: socket.socket) -> list[dict]:
    """The agent's messages received so far (the socket has a short timeout)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def test_a_hanging_slurm_call_holds_up_neither_the_workloads_nor_the_spool(tmp_path):
    gate = tmp_path / "gate"
    slow_tools(tmp_path / "bin", gate)
    node = SimpleNamespace(node_name="slow-node", conf_path=str(tmp_path / "slurm.conf"))
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    # Each hanging call would hold a blocked loop for a minute.
    with ExecutorHarness(node, DRAIN, SLURM, env=env, settings={"command_timeout_s": 60.0}) as h:  # type: ignore[arg-type]
        h.start()
        sock_path = os.path.join(h.run_dir, "agent.sock")
        wait_for(lambda: os.path.exists(sock_path), 10, "the agent socket")
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(sock_path)
        client.settimeout(0.2)
        client.sendall(json.dumps({"op": "register", "name": "trainer", "pid": os.getpid()}).encode() + b"\n")
        try:
            n = h.announce()
            h.wait_event("drain.started", n["id"], timeout=10)
            # Not cordoned (DRAIN hangs): the clients are told TELL_CLIENTS_AFTER_S after receipt anyway.
            told = h.wait_event("drain.clients_told", n["id"], timeout=15)
            received: list[dict] = []

            def notice_heard() -> dict | None:
                received.extend(lines(client))
                return next((m for m in received if m.get("op") == "notice"), None)
            notice = wait_for(notice_heard, 15, "the notice on the agent socket")
            assert not gate.exists()   # all of it while the Slurm calls still hang
        finally:
            gate.touch()
            client.close()
    assert notice["id"] == n["id"] and told["data"]["clients"] == 1
    assert "cordoned" not in h.record(n["id"]).get("steps", {})
