"""executor.dry_run: every action the executor would take is logged (and recorded), and none is taken."""
from __future__ import annotations

import io
import time

import pytest
import ujson
import zmq

from common.config import load
from common.log import Logger
from common.timefmt import format_rfc3339
from executor.__main__ import Executor
from tests.agent_rig import write_config

READS = ("get_node", "list_pods")


class FakeKube:
    """Answers reads from memory; records every other call (any write, present or future) and refuses it."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.writes: list[str] = []
        self.pods = [{"metadata": {"namespace": "ns", "name": "web-1"}, "spec": {"nodeName": node},
                      "status": {"phase": "Running"}}]

    def get_node(self) -> dict:
        return {"metadata": {"name": self.node, "resourceVersion": "1"}, "spec": {}}

    def list_pods(self) -> list[dict]:
        return self.pods

    def __getattr__(self, name: str):
        def write(*args, **kwargs):
            self.writes.append(name)
            return {}
        return write


class FakeClients:
    def __init__(self) -> None:
        self.announced: list[dict] = []

    def announce(self, notice: dict, now: float | None = None) -> None:
        self.announced.append(notice)

    def clients(self) -> list:
        return ["one"]

    def withdraw(self, notice_id: str) -> None:
        pass

    def drain_acks(self) -> list:
        return []

    def close(self) -> None:
        pass


@pytest.fixture
def make_executor(tmp_path):
    made = []

    def make(dry_run: bool) -> tuple[Executor, io.StringIO]:
        path = str(tmp_path / f"agent-{dry_run}.toml")
        run_dir = tmp_path / f"run-{dry_run}"
        write_config(path, {"node": {"name": "node-a", "scheduler": "kubernetes"},
                            "kubernetes": {"api_url": "http://127.0.0.1:9", "token_file": ""},
                            "paths": {"runtime_dir": str(run_dir), "state_dir": str(tmp_path / "state")},
                            "agent_socket": {"path": str(tmp_path / f"agent-{dry_run}.sock")},
                            "executor": {"dry_run": dry_run}})
        run_dir.mkdir(mode=0o700)
        ctx = zmq.Context()
        out = io.StringIO()
        ex = Executor(load(path), Logger("executor", stream=out), ctx)
        ex.clients.close()
        ex.api, ex.clients = FakeKube("node-a"), FakeClients()
        made.append(ctx)
        return ex, out

    yield make
    for ctx in made:
        ctx.destroy(linger=0)


def drive(ex: Executor) -> None:
    """A notice arrives, the drain runs a few rounds, then the notice is withdrawn."""
    now = time.time()
    notice = {"id": "n1", "kind": "reclaim", "node": "node-a", "instance_id": "", "source": "test",
              "issued_at": format_rfc3339(now), "deadline": format_rfc3339(now + 120), "received_at": now}
    ex._on_notice_state({"active": [notice], "withdrawn": []})
    for _ in range(3):
        ex.work(time.time())
    ex._on_notice_state({"active": [], "withdrawn": ["n1"]})
    ex.work(time.time())


def log_lines(out: io.StringIO) -> list[dict]:
    return [ujson.loads(line) for line in out.getvalue().splitlines()]


def test_dry_run_logs_every_action_and_takes_none(make_executor):
    ex, out = make_executor(True)
    drive(ex)
    assert ex.api.writes == [] and ex.clients.announced == []
    actions = [r["action"] for r in log_lines(out) if r["msg"] == "drain.dry_run"]
    assert actions == ["cordon+taint", "tell_clients", "uncordon+untaint"]
    pending = [ev for _, ev in ex.spool.outbox.pending.values()]
    assert [ev["data"]["action"] for ev in pending if ev["type"] == "drain.dry_run"] == actions
    assert all(ev["data"].get("dry_run") for ev in pending if ev["type"] in ("drain.cordoned", "drain.clients_told"))
    # Reads still happen: the would-be drain reports what is on the node.
    assert ex.progress["n1"]["remaining"] == ["ns/web-1"]


def test_without_dry_run_the_same_drive_acts(make_executor):
    """The control: the fake does see writes and the clients are told when dry_run is off."""
    ex, out = make_executor(False)
    drive(ex)
    assert "patch_node" in ex.api.writes and len(ex.clients.announced) >= 1
    assert not [r for r in log_lines(out) if r["msg"] == "drain.dry_run"]
