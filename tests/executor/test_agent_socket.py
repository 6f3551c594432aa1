"""The server over real Unix sockets, served by a selector loop in a thread (see harness)."""
from __future__ import annotations

import os
import resource
import socket
import stat
import time

import pytest

from executor.agent_socket import AgentSocketError, AgentSocketServer, ServerLimits
from tests.support.agent_socket import RawClient, make_notice, wait_until


def registered(path: str, name: str = "w") -> RawClient:
    c = RawClient(path)
    c.register(name)
    return c


def test_fifty_clients_all_receive_the_notice(serve):
    st = serve()
    clients = [registered(st.path, f"w{i}") for i in range(50)]
    notice = make_notice("n-50")
    st.announce(notice)
    for c in clients:
        assert c.read_op("notice") == {"op": "notice", **notice}
    assert st.stats()["notices_sent"] == 50


def test_client_registering_after_the_notice_gets_it_at_once(serve):
    st = serve()
    st.announce(make_notice("n1"))
    c = RawClient(st.path)
    c.send({"op": "register", "name": "late", "pid": os.getpid()})
    assert c.read()["op"] == "registered"
    assert c.read()["id"] == "n1"


def test_ack_surfaces_through_drain_acks_with_credentials_and_time(serve):
    st = serve()
    c = registered(st.path, "trainer")
    st.announce(make_notice("n1"))
    c.read_op("notice")
    c.send({"op": "ack", "id": "n1", "status": "checkpointed"})
    assert c.read_op("acked") == {"op": "acked", "id": "n1", "status": "checkpointed"}
    [ack] = wait_until(st.acks, what="the ack")
    assert (ack.name, ack.pid, ack.uid, ack.notice_id, ack.status) == (
        "trainer", os.getpid(), os.getuid(), "n1", "checkpointed")
    assert ack.latency_s >= 0 and ack.client >= 1


def test_ack_from_unregistered_or_for_another_notice_is_refused(serve):
    st = serve()
    first = registered(st.path)
    st.announce(make_notice("n1"))
    st.withdraw("n1")
    assert first.read_op("withdrawn") == {"op": "withdrawn", "id": "n1"}
    st.announce(make_notice("n2"))
    second = registered(st.path)
    second.send({"op": "ack", "id": "n1", "status": "checkpointed"})
    assert second.read_op("error")["code"] == "unknown_notice"
    anon = RawClient(st.path)
    anon.send({"op": "ack", "id": "n2", "status": "checkpointed"})
    assert anon.read_op("error")["code"] == "not_registered"
    assert st.acks() == []


@pytest.mark.parametrize(("payload", "code"), [
    (b"\x00\x01\x02garbage\xff\n", "bad_json"),
    (b'{"op": "register", "name": \n', "bad_json"),
    (b"A" * (1 << 20) + b"\n", "line_too_long"),
])
def test_bad_input_gets_an_error_while_a_good_client_is_served(serve, payload, code):
    st = serve()
    good = registered(st.path, "good")
    bad = RawClient(st.path)
    try:
        bad.send(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close mid-megabyte; the error line is still readable
    assert bad.read_op("error")["code"] == code
    st.announce(make_notice("n1"))
    assert good.read_op("notice")["id"] == "n1"
    assert st.stats()[f"error.{code}"] == 1
    if code == "line_too_long":
        assert bad.closed()


def test_client_that_never_reads_is_dropped_and_does_not_hold_up_others(serve):
    st = serve(limits=ServerLimits(sndbuf=4096, max_pending_bytes=2048))
    deaf = registered(st.path, "deaf")  # registers, then never reads again
    good = registered(st.path, "good")
    for i in range(200):
        st.announce(make_notice(f"n{i}"))
        assert good.read_op("notice")["id"] == f"n{i}"
    stats = st.stats()
    assert stats["closed.slow_reader"] == 1
    assert stats["registered"] == 1
    deaf.close()


def test_slowloris_is_cut_off_and_a_good_client_still_hears_the_notice(serve):
    st = serve(limits=ServerLimits(line_timeout_s=0.6))
    good = registered(st.path, "good")
    slow = registered(st.path, "slow")
    payload = b'{"op":"ping","pad":"' + b"x" * 100
    sent = 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # a byte every 0.2 s until the server hangs up
        try:
            slow.sock.sendall(payload[sent:sent + 1])
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += 1
        if st.stats().get("error.line_timeout"):
            break
        time.sleep(0.2)
    assert slow.read_op("error")["code"] == "line_timeout"
    assert slow.closed()
    st.announce(make_notice("n1"))
    assert good.read_op("notice")["id"] == "n1"


def test_thousand_connections_each_get_a_clear_error_and_are_counted(serve):
    st = serve(limits=ServerLimits(max_clients=64, register_timeout_s=1.0))
    good = registered(st.path, "good")
    crowd = [RawClient(st.path) for _ in range(1000)]
    st.announce(make_notice("n1"))
    assert good.read_op("notice")["id"] == "n1"
    codes = {}
    for c in crowd:  # the 63 admitted hit the register timeout; the rest are turned away at once
        code = c.read_op("error")["code"]
        codes[code] = codes.get(code, 0) + 1
        assert c.closed()
        c.close()
    assert codes == {"too_many_clients": 1000 - 63, "register_timeout": 63}
    stats = st.stats()
    assert stats["error.too_many_clients"] == 937 and stats["error.register_timeout"] == 63
    assert stats["registered"] == 1


def test_listen_sets_mode_and_group_and_creates_the_directory(sock_dir):
    path = os.path.join(sock_dir, "run", "sco-agent", "agent.sock")
    server = AgentSocketServer(path, mode=0o660, group=4321)
    server.listen()
    try:
        st = os.stat(path)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
        assert st.st_gid == 4321
    finally:
        server.close()
    assert not os.path.exists(path)


def test_unknown_owner_name_fails_at_construction(sock_path):
    with pytest.raises(KeyError):
        AgentSocketServer(sock_path, owner="no-such-user-sco")


def test_stale_socket_file_is_replaced(serve, sock_path):
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(sock_path)
    dead.close()  # the file stays and nobody listens: what a SIGKILLed agent leaves behind
    st = serve()
    assert RawClient(st.path).register()["op"] == "registered"


def test_live_socket_and_non_socket_files_are_left_alone(serve, sock_dir):
    st = serve()
    with pytest.raises(AgentSocketError, match="listening"):
        AgentSocketServer(st.path).listen()
    assert registered(st.path)  # the running server was not disturbed
    plain = os.path.join(sock_dir, "plain")
    with open(plain, "w") as f:
        f.write("keep me")
    with pytest.raises(AgentSocketError, match="not a socket"):
        AgentSocketServer(plain).listen()
    with open(plain) as f:
        assert f.read() == "keep me"


def test_close_does_not_unlink_a_newer_agents_socket(sock_path):
    old = AgentSocketServer(sock_path)
    old.listen()
    os.unlink(sock_path)
    new = AgentSocketServer(sock_path)
    new.listen()
    try:
        old.close()
        assert os.path.exists(sock_path)
    finally:
        new.close()


def test_idle_server_has_no_timer(serve):
    """With only registered, quiet clients the loop may sleep indefinitely (no idle wake-ups)."""
    st = serve()
    registered(st.path)
    assert st.call(lambda s: s.next_deadline()) is None


def test_running_out_of_fds_pauses_accepting_instead_of_spinning(serve):
    """EMFILE leaves the connection queued and the listener readable: the server must back off,
    then accept the queued clients once fds are available again."""
    st = serve()
    socks = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(5)]  # fds made up front
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.dup(0)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))  # no new fd can be made
    try:
        for s in socks:
            s.connect(st.path)  # queued in the backlog; accept() fails with EMFILE
        wait_until(lambda: st.stats().get("accept_paused"), what="accepting to pause")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    wait_until(lambda: st.stats()["open"] == 5, what="the queued clients to be accepted")
    assert st.stats()["accept_paused"] <= 3  # paused about once a second, not thousands of retries
    for s in socks:
        s.close()
