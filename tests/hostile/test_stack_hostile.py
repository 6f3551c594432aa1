"""The whole agent under a flood and under inspection: bounded memory, counted refusals, tight modes.

One agent (real supervisord, nats-server, metadata and API-server emulators)
serves every test in this module, so each test leaves it running and healthy;
memory is compared before and after each flood in the process that takes it.
The bounds are generous on purpose (20 MiB, where the whole agent's budget is
40): they catch a leak or an unbounded buffer, not a few allocator pages.
"""
from __future__ import annotations

import os
import resource
import socket
import stat
import time
from collections.abc import Iterator

import psutil
import pytest
import ujson
import zmq

from common import ipc
from common.events import Origin, make_event
from common.timefmt import format_rfc3339
from tests.support.stack import HALL, NODE, OTHER_NODE, Stack
from tests.support.wait import wait_for
from tests.watcher.rig import NoticeSub
from watcher.providers import aws

MIB = 1 << 20
GROWTH_BOUND = 20 * MIB
SOCKET_MODE = "0640"


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    base = tmp_path_factory.mktemp("hostile")
    with Stack(str(base), settings={"agent_socket": {"mode": SOCKET_MODE, "group": "daemon"}}) as s:
        yield s


@pytest.fixture(scope="module")
def notices(stack) -> Iterator[NoticeSub]:
    """The watcher's announcements (with its counters), as the executor and verifier hear them."""
    ctx = zmq.Context()
    sub = NoticeSub(ctx, stack.agent.run_dir).start()
    wait_for(lambda: sub.states, 10, "the watcher's first announcement")
    yield sub
    sub.stop()
    ctx.destroy(linger=0)


def rss(stack: Stack, program: str) -> int:
    return psutil.Process(stack.agent.pid(program)).memory_info().rss


def counter(notices: NoticeSub, name: str) -> int:
    return notices.counters().get(name, 0)


def log_lines(stack: Stack, program: str, msg: str) -> list[dict]:
    out = []
    for line in stack.agent.log(program).splitlines():
        try:
            rec = ujson.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("msg") == msg:
            out.append(rec)
    return out


def publish_many(stack: Stack, subject: str, payloads: list[bytes]) -> None:
    """Publish every payload on one raw NATS connection, as fast as the socket takes them."""
    with socket.create_connection(("127.0.0.1", stack.nats.port), timeout=30) as s:
        f = s.makefile("rb")
        f.readline()   # INFO
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
        s.sendall(b"".join(b"PUB %s %d\r\n%s\r\n" % (subject.encode(), len(p), p) for p in payloads) + b"PING\r\n")
        while (line := f.readline()) and not line.startswith(b"PONG"):
            assert not line.startswith(b"-ERR"), line


# -- floods ------------------------------------------------------------------------------------

def test_relay_burst_of_10000_notices_for_other_nodes(stack, notices):
    """Ignored (or dropped as a slow consumer) and counted, every one; logged a handful of times;
    the watcher keeps its PID and its memory."""
    pid, before = stack.agent.pid("watcher"), rss(stack, "watcher")
    seen_before = counter(notices, "ignored.reason.other_node") + counter(notices, "relay.slow_consumer")
    now = time.time()
    payloads = [ujson.dumps({"v": 1, "id": f"flood-{i}", "kind": "reclaim", "node": OTHER_NODE,
                             "issued_at": format_rfc3339(now), "deadline": format_rfc3339(now + 120),
                             "source": "sco"}).encode() for i in range(10_000)]
    publish_many(stack, f"sco.notice.{HALL}.{NODE}", payloads)

    def accounted() -> int:
        n = counter(notices, "ignored.reason.other_node") + counter(notices, "relay.slow_consumer") - seen_before
        return n if n >= 10_000 else 0

    assert wait_for(accounted, 25, "10,000 notices counted") == 10_000
    assert stack.agent.pid("watcher") == pid
    assert rss(stack, "watcher") - before < GROWTH_BOUND
    assert len(log_lines(stack, "watcher", "notice.ignored")) <= 3
    assert len(stack.events_of("notice.ignored")) <= 3
    assert not stack.cordoned() and not notices.active()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_metadata_body_of_100_mb_is_refused_after_a_bounded_read(stack, notices, chunked):
    """The emulator streams 100 MB; the watcher reads at most metadata.max_body, counts a
    metadata.error too_large (and says so in the spool), and its memory stays flat."""
    before, seen = rss(stack, "watcher"), counter(notices, "metadata.error.too_large")
    stack.meta.fault("huge", path=aws.INSTANCE_ACTION, size=100 * MIB, chunked=chunked, count=2)
    wait_for(lambda: counter(notices, "metadata.error.too_large") >= seen + 2, 20, "two too_large errors")
    wait_for(lambda: [e for e in stack.events_of("metadata.error") if e["data"]["reason"] == "too_large"],
             10, "a metadata.error event with reason too_large")
    assert rss(stack, "watcher") - before < GROWTH_BOUND
    stack.meta.clear_faults()


def test_hung_metadata_service_times_out_while_the_relay_is_still_heard(stack, notices):
    """Every metadata request hangs: each poll ends at metadata.timeout_s as a counted timeout,
    and a notice on the relay meanwhile is received and drained at once (the poll runs in its
    own thread; nothing waits for it)."""
    seen = counter(notices, "metadata.error.timeout")
    stack.meta.fault("hang", path="/latest/", seconds=60)
    try:
        wait_for(lambda: counter(notices, "metadata.error.timeout") >= seen + 2, 20, "two timed-out polls")
        doc = stack.publish_notice(deadline_in=600)
        assert stack.wait_event("notice.received", doc["id"], timeout=10)["data"]["channel"] == "relay"
        wait_for(stack.cordoned, 10, "node cordoned while the metadata service hangs")
    finally:
        stack.meta.clear_faults()
    stack.publish_notice(kind="cancel", notice_id=doc["id"])
    wait_for(lambda: not stack.cordoned(), 20, "the cancelled drain undone")


def test_thousand_agent_socket_clients(stack):
    """1,000 workloads register at once: all served, the executor's memory bounded, and a client
    arriving afterwards is still served."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    path = stack.agent.settings["agent_socket"]["path"]
    pid, before = stack.agent.pid("executor"), rss(stack, "executor")
    clients = []
    try:
        for i in range(1000):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(10)
            c.connect(path)
            c.sendall(ujson.dumps({"op": "register", "name": f"w{i}", "pid": os.getpid()}).encode() + b"\n")
            clients.append(c)
        for c in clients:
            assert b'"registered"' in c.recv(4096)
        assert stack.agent.pid("executor") == pid
        assert rss(stack, "executor") - before < GROWTH_BOUND
    finally:
        for c in clients:
            c.close()
    late = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    late.settimeout(10)
    late.connect(path)
    late.sendall(b'{"op": "register", "name": "late", "pid": 1}\n')
    assert b'"registered"' in late.recv(4096)
    late.close()


def test_foreign_writer_on_the_spool_intake(stack):
    """Something that reached the ROUTER socket floods it with garbage: every message refused and
    counted by reason, a few log lines, the spool keeps running and storing real events."""
    pid, before = stack.agent.pid("spool"), rss(stack, "spool")
    ctx = zmq.Context()
    sock = ipc.connect(ctx, zmq.DEALER, stack.agent.run_dir, ipc.SPOOL_INTAKE)
    junk = [[b"event", b"{not json"], [b"event", b"[]"], [b"bogus", b"{}"], [b"event", b'{"type": "x"}']]
    for i in range(2000):
        sock.send_multipart(junk[i % len(junk)])
    # One real event last, and its acknowledgement awaited: the spool has read everything before
    # it (one pipe is FIFO), and what a closing peer left unread is not silently part of the test.
    ev = make_event("drain.dry_run", Origin(NODE, HALL, "foreign"), 1)
    sock.send_multipart(ipc.encode(ipc.T_EVENT, ev))
    assert sock.poll(20_000), "no acknowledgement from the spool"
    assert ipc.decode(sock.recv_multipart()) == (ipc.T_ACK, {"ids": [ev["event_id"]]})
    sock.close(0)
    ctx.destroy(linger=0)

    def reported() -> int:
        n = sum(e["data"]["count"] for e in stack.events_of("ipc.rejected") if e["source"].startswith("spool"))
        return n if n >= 2000 else 0

    # Reported at once for each reason, then every 10 s with the count since: all 2,000 within ~12 s.
    assert wait_for(reported, 25, "2,000 refusals reported") == 2000
    lines = log_lines(stack, "spool", "ipc.rejected")
    assert {line["reason"] for line in lines} == {"bad_json", "not_object", "topic", "bad_shape"}
    assert len(lines) <= 12
    assert stack.agent.pid("spool") == pid and rss(stack, "spool") - before < GROWTH_BOUND
    assert stack.events_of("drain.dry_run")[0]["event_id"] == ev["event_id"]   # real events still stored


# -- permissions -------------------------------------------------------------------------------

def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_runtime_dir_sockets_and_files_are_private(stack):
    """Runtime dir 0700; every IPC socket 0600; the spool file and every state file 0600; the
    agent socket exactly as configured (mode and group)."""
    run, state = stack.agent.run_dir, stack.agent.state_dir
    assert mode(run) == 0o700 and os.stat(run).st_uid == os.geteuid()
    for name in (ipc.WATCHER_PUB, ipc.EXECUTOR_PUB, ipc.VERIFIER_PUB, ipc.SPOOL_INTAKE):
        st = os.stat(os.path.join(run, name))
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, name
    agent_sock = os.stat(stack.agent.settings["agent_socket"]["path"])
    assert stat.S_ISSOCK(agent_sock.st_mode) and stat.S_IMODE(agent_sock.st_mode) == int(SOCKET_MODE, 8)
    assert agent_sock.st_gid == 1   # daemon
    assert mode(stack.spool_path) == 0o600
    # A notice makes every process persist its state.
    doc = stack.publish_notice(deadline_in=600)
    stack.wait_event("verifier.clock_started", doc["id"])
    # In the state dir: what a drain needs to resume must outlive a unit restart (which removes run).
    files = {os.path.join(state, "notice.json"), os.path.join(state, "executor.json"),
             os.path.join(state, "verdicts.json")}
    wait_for(lambda: all(os.path.exists(p) for p in files), 10, "the state files")
    for path in files:
        assert mode(path) == 0o600, path
    # The only file meant for others: what `sco-agentctl status` shows (no secret in it).
    assert mode(os.path.join(run, "contract.json")) == 0o644
    assert mode(os.path.join(stack.agent.sup_dir, "supervisor.sock")) & 0o077 == 0
    stack.publish_notice(kind="cancel", notice_id=doc["id"])
    wait_for(lambda: not stack.cordoned(), 20, "the cancelled drain undone")
