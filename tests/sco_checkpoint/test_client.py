"""The stdlib checkpoint client against a real server: callbacks, acks, restarts, waits."""
from __future__ import annotations

import threading

import pytest

from sco_checkpoint.client import (
    Connection,
    ProtocolError,
    ack_notice,
    backoff,
    default_path,
    on_notice,
    wait_for_notice,
)
from tests.support.agent_socket import ServerThread, make_notice, wait_until


@pytest.fixture
def listeners():
    started = []
    yield started
    for listener in started:
        listener.stop()


def registered_count(st: ServerThread) -> int:
    return st.stats()["registered"]


@pytest.mark.parametrize(("result", "status"), [(None, "checkpointed"), (True, "checkpointed"),
                                                 ({"step": 3}, "checkpointed"), (False, "failed")])
def test_callback_result_becomes_the_ack_status(serve, listeners, result, status):
    st = serve()
    seen = []
    listeners.append(on_notice(lambda n: seen.append(n) or result, path=st.path, name="job"))
    wait_until(lambda: registered_count(st) == 1, what="registration")
    st.announce(make_notice("n1"))
    [ack] = wait_until(st.acks, what="the ack")
    assert (ack.name, ack.notice_id, ack.status, ack.replay) == ("job", "n1", status, False)
    assert [n["id"] for n in seen] == ["n1"]


def test_callback_exception_acks_failed_with_the_reason(serve, listeners):
    st = serve()

    def broken(notice):
        raise OSError("disk full")

    listeners.append(on_notice(broken, path=st.path))
    wait_until(lambda: registered_count(st) == 1, what="registration")
    st.announce(make_notice("n1"))
    [ack] = wait_until(st.acks, what="the ack")
    assert ack.status == "failed" and ack.detail == "OSError: disk full"


def test_agent_restart_resends_the_notice_and_the_client_replays_its_answer(serve, listeners):
    """After an agent restart the client reconnects, gets the still-active notice again, does
    not checkpoint twice, and tells the new agent what it answered (marked replay)."""
    first = serve()
    calls = []
    listener = on_notice(lambda n: calls.append(n["id"]), path=first.path)
    listeners.append(listener)
    wait_until(lambda: registered_count(first) == 1, what="registration")
    notice = make_notice("n1")
    first.announce(notice)
    wait_until(first.acks, what="the first ack")
    first.stop()

    second = serve()  # same path: the executor restarted and re-announces the persisted notice
    second.announce(notice)
    [ack] = wait_until(second.acks, timeout=15, what="the replayed ack")
    assert (ack.notice_id, ack.status, ack.replay) == ("n1", "checkpointed", True)
    assert calls == ["n1"]
    second.announce(make_notice("n2"))
    wait_until(lambda: len(second.acks()) == 2, what="the ack of a new notice")
    assert calls == ["n1", "n2"]
    assert second.acks()[1].replay is False


def test_listener_waits_for_an_agent_that_is_not_up_yet(serve, listeners, sock_path):
    calls = []
    listeners.append(on_notice(lambda n: calls.append(n["id"]), path=sock_path))
    st = serve()
    st.announce(make_notice("n1"))
    wait_until(st.acks, timeout=15, what="the ack after the agent came up")
    assert calls == ["n1"]


def test_without_reconnect_the_listener_ends_with_the_connection(serve):
    st = serve()
    listener = on_notice(lambda n: None, path=st.path, reconnect=False)
    wait_until(listener.connected.is_set, what="connection")
    st.stop()
    assert listener.join(10)


def test_wait_for_notice_returns_the_notice(serve):
    st = serve()
    st.announce(make_notice("n1"))
    notice = wait_for_notice(5, path=st.path)
    assert notice["op"] == "notice" and notice["id"] == "n1"


def test_wait_for_notice_times_out_with_none(serve):
    st = serve()
    assert wait_for_notice(0.3, path=st.path) is None
    assert wait_for_notice(0.3, path=st.path + ".absent") is None


def test_wait_for_notice_survives_the_agent_starting_late(serve, sock_path):
    result = {}
    t = threading.Thread(target=lambda: result.update(n=wait_for_notice(15, path=sock_path)))
    t.start()
    st = serve()
    st.announce(make_notice("n1"))
    t.join(20)
    assert result["n"]["id"] == "n1"


def test_ack_notice_from_a_fresh_connection(serve):
    st = serve()
    st.announce(make_notice("n1"))
    reply = ack_notice("n1", "checkpointed", path=st.path, name="script")
    assert reply == {"op": "acked", "id": "n1", "status": "checkpointed"}
    [ack] = wait_until(st.acks, what="the ack")
    assert ack.name == "script"
    with pytest.raises(ProtocolError, match="unknown_notice"):
        ack_notice("n0", "checkpointed", path=st.path)


def test_connection_keeps_a_notice_that_arrives_before_a_reply(serve):
    """The notice sent right after 'registered' is not lost while waiting for other replies."""
    st = serve()
    st.announce(make_notice("n1"))
    conn = Connection(st.path)
    try:
        conn.send({"op": "ping"})
        assert conn.read(5)["op"] == "notice"
        assert conn.read(5)["op"] == "pong"
    finally:
        conn.close()


def test_backoff_is_capped_and_jittered():
    delays = [backoff(n) for n in range(1, 40)]
    assert all(0 < d <= 5.0 for d in delays)
    assert backoff(1) <= 0.1
    assert len({round(backoff(30), 6) for _ in range(20)}) > 1


def test_default_path_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("SCO_AGENT_SOCKET", "/tmp/x.sock")
    assert default_path() == "/tmp/x.sock"
    monkeypatch.delenv("SCO_AGENT_SOCKET")
    assert default_path() == "/run/sco-agent-socket/agent.sock"


class RawAgent:
    """An agent socket that registers every client, then sends ``lines[i]`` to the i-th connection
    and records what each one answered (issue 26, point 7: a line the client cannot foresee)."""

    def __init__(self, path: str, lines: list[bytes]) -> None:
        import socket

        self.lines, self.answers = lines, []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for line in self.lines:
            conn, _ = self.server.accept()
            f = conn.makefile("rwb")
            f.readline()   # register
            f.write(b'{"op":"registered","id":"c1"}\n' + line)
            f.flush()
            self.answers.append(f.readline())
            if self.answers[-1]:
                f.write(b'{"op":"acked","id":"n1"}\n')
                f.flush()
            conn.close()


def test_a_listener_outlives_a_line_nested_deeper_than_json_parses(sock_path, listeners):
    """Nested 60,000 deep (under the 64 KiB line limit), json.loads raises RecursionError -- no
    ValueError -- and the listener thread used to end on it: the workload never heard of a notice
    again. Now it is a protocol error; the listener connects again and answers the next notice."""
    import json as json_

    agent = RawAgent(sock_path, [b"[" * 60000 + b"\n",
                                 json_.dumps({"op": "notice", **make_notice("n1")}).encode() + b"\n"])
    seen = []
    listener = on_notice(lambda n: seen.append(n["id"]), path=sock_path, name="job")
    listeners.append(listener)
    wait_until(lambda: len(agent.answers) == 2, 20)
    assert seen == ["n1"] and b'"status":"checkpointed"' in agent.answers[1]
    assert listener._thread is not None and listener._thread.is_alive()
