"""Two notices draining at once, with the whole agent: each socket client is told the one that
governs it (the earliest deadline), told again only when that changes, and its acks are accepted.

The client is written from DESIGN.md section 6 alone -- a raw Unix socket speaking newline-delimited
JSON (register, then read notices and ack them) -- not the project's own sco_checkpoint client, so
the test holds the agent to the design rather than to its own client's habits.
"""
from __future__ import annotations

import calendar
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.notices import relay_payload
from tests.support.stack import HALL, NODE, Stack
from tests.support.wait import wait_for

CONTRACT = {"budget_s": 60, "checkpoint_s": 20, "evict_s": 20, "margin_s": 5}


class DesignClient:
    """DESIGN §6: connect, ``{"op":"register","name","pid"}``, then every line the agent sends is
    kept; ``ack`` answers a notice with ``{"op":"ack","id","status"}``."""

    def __init__(self, path: str, name: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.lines: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.sock.sendall(json.dumps({"op": "register", "name": name, "pid": 4242}).encode() + b"\n")
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                with self.lock:
                    self.lines.append(json.loads(line))

    def of(self, op: str) -> list[dict[str, Any]]:
        with self.lock:
            return [m for m in self.lines if m["op"] == op]

    def ack(self, notice_id: str) -> None:
        self.sock.sendall(json.dumps({"op": "ack", "id": notice_id, "status": "checkpointed"}).encode() + b"\n")

    def close(self) -> None:
        self.sock.close()


def _publish(s: Stack, doc: dict[str, Any]) -> None:
    s.nats.publish(f"sco.notice.{HALL}.{NODE.replace('.', '_')}", json.dumps(doc).encode())


def _both_told_acked_and_done(s: Stack, client: DesignClient, first: str, second: str) -> None:
    """``first`` (the later deadline) was heard first, then ``second`` took over. The client acks the
    earlier-told one too; both acks land, and both drains finish with the client told exactly twice."""
    wait_for(lambda: [n["id"] for n in client.of("notice")] == [first, second], 30,
             "the earlier deadline to take over")
    client.ack(first)    # told before, still active: accepted
    client.ack(second)
    wait_for(lambda: {a["id"] for a in client.of("acked")} == {first, second}, 10, "both acks answered")
    for nid in (first, second):
        ack = s.wait_event("drain.checkpoint_acked", nid, timeout=20)
        assert ack["data"]["client"] == "design-client" and ack["data"]["status"] == "checkpointed"
    # Both drains run to the end; every loop turn meanwhile sees both notices active.
    for nid in (first, second):
        s.wait_event("drain.done", nid, timeout=60)
    assert [n["id"] for n in client.of("notice")] == [first, second]   # no flapping
    assert client.of("error") == []
    assert client.of("withdrawn") == []


@contextmanager
def agent_and_client(tmp_path) -> Iterator[tuple[Stack, DesignClient]]:
    """The whole agent, and one registered design client on its socket."""
    # A maintenance drains at once here (the built-in start defers it: test_deferred_start_e2e.py).
    with Stack(str(tmp_path), contract=CONTRACT, contract_extra={"start": {"maintenance": "at_once"}}) as s:
        path = s.agent.settings["agent_socket"]["path"]
        wait_for(lambda: _connectable(path), 10, "agent socket")
        client = DesignClient(path, "design-client")
        try:
            wait_for(lambda: client.of("registered"), 10, "registered")
            yield s, client
        finally:
            client.close()


def test_reclaim_and_maintenance_at_once_the_earlier_deadline_governs(tmp_path):
    with agent_and_client(tmp_path) as (s, client):
        maintenance = s.publish_notice(kind="maintenance", deadline_in=110)
        wait_for(lambda: client.of("notice"), 30, "the maintenance notice")
        reclaim = s.publish_notice(kind="reclaim", deadline_in=80)
        _both_told_acked_and_done(s, client, maintenance["id"], reclaim["id"])
        assert client.of("notice")[1]["kind"] == "reclaim"


def test_one_reclaim_from_relay_and_imds_three_seconds_apart(tmp_path):
    with agent_and_client(tmp_path) as (s, client):
        imds_at = float(int(time.time()) + 90)          # IMDS times are whole seconds
        relay = relay_payload(None, "reclaim", NODE, deadline_in=imds_at + 3 - time.time())
        _publish(s, relay)
        wait_for(lambda: client.of("notice"), 30, "the relay's notice")
        s.meta.aws_spot("terminate", at=imds_at)
        notices = wait_for(lambda: len(n := client.of("notice")) >= 2 and n, 30, "the IMDS notice")
        imds_id = notices[1]["id"]
        assert imds_id != relay["id"]
        assert calendar.timegm(time.strptime(notices[1]["deadline"][:19], "%Y-%m-%dT%H:%M:%S")) == imds_at
        _both_told_acked_and_done(s, client, relay["id"], imds_id)


def _connectable(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True
