"""Who can reach the agent socket: with the shipped defaults an unprivileged workload can, and its
peer credentials are what the agent records; a 0660 socket admits its group only. The clients run
as ``nobody`` in a forked child (the tests run as root)."""
from __future__ import annotations

import os
import pwd
import stat

import pytest

from common.config import build, defaults
from executor.clients import blocking_dir
from tests.support.agent_socket import RawClient, ServerThread, as_user, make_notice, wait_until

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def socket_dir(sock_dir: str) -> str:
    """A directory like /run: searchable by everyone; the socket's own directory is made in it."""
    os.chmod(sock_dir, 0o755)
    return os.path.join(sock_dir, "sco-agent-socket")


def client_session(path: str) -> dict:
    """What an unprivileged workload does: connect, register, wait for the notice, ack it."""
    c = RawClient(path)
    reply = c.register("unprivileged")
    notice = c.read_op("notice", timeout=10)
    c.send({"op": "ack", "id": notice["id"], "status": "checkpointed"})
    return {"registered": reply, "acked": c.read_op("acked")}


def connect_only(path: str) -> dict:
    return {"registered": RawClient(path).register("unprivileged")}


def test_the_defaults_give_the_socket_a_directory_of_its_own_open_to_local_users():
    d = defaults()
    assert os.path.dirname(d["agent_socket"]["path"]) != d["paths"]["runtime_dir"]
    assert int(d["agent_socket"]["mode"], 8) == 0o666


def test_an_unprivileged_client_connects_with_the_default_mode_and_is_recorded_as_itself(socket_dir):
    cfg = build({"agent_socket": {"path": os.path.join(socket_dir, "agent.sock")}}).agent_socket
    st = ServerThread(cfg.path, mode=int(cfg.mode, 8))
    try:
        assert stat.S_IMODE(os.stat(socket_dir).st_mode) == 0o755   # made by the server, umask or not
        assert blocking_dir(cfg.path) is None
        st.announce(make_notice("n-1"))
        out = as_user("nobody", lambda: client_session(cfg.path))
        assert "error" not in out, out
        reg = out["registered"]
        assert (reg["uid"], reg["gid"]) == (NOBODY.pw_uid, NOBODY.pw_gid)   # SO_PEERCRED, not a claim
        assert out["acked"] == {"op": "acked", "id": "n-1", "status": "checkpointed"}
        [ack] = wait_until(st.acks, what="the ack")
        assert (ack.uid, ack.gid, ack.notice_id) == (NOBODY.pw_uid, NOBODY.pw_gid, "n-1")
    finally:
        st.stop()


def test_a_0660_socket_refuses_other_users_and_admits_its_group(socket_dir):
    path = os.path.join(socket_dir, "agent.sock")
    st = ServerThread(path, mode=0o660)
    try:
        assert as_user("nobody", lambda: connect_only(path))["error"] == "EACCES"
    finally:
        st.stop()
    st = ServerThread(path, mode=0o660, group=NOBODY.pw_gid)
    try:
        out = as_user("nobody", lambda: connect_only(path))
        assert out["registered"]["gid"] == NOBODY.pw_gid, out
        assert os.stat(path).st_gid == NOBODY.pw_gid
    finally:
        st.stop()


@pytest.mark.parametrize(("mode", "reported"), [(0o666, True), (0o600, False)])
def test_a_socket_inside_a_0700_directory_is_reported_when_its_mode_admits_others(sock_dir, mode, reported):
    """The old default (inside the 0700 runtime dir): the agent warns, naming the directory; an
    owner-only socket admits nobody else, so nothing above it keeps anyone out."""
    os.chmod(sock_dir, 0o700)
    path = os.path.join(sock_dir, "agent.sock")
    st = ServerThread(path, mode=mode)
    try:
        assert blocking_dir(path) == (sock_dir if reported else None)
        assert as_user("nobody", lambda: connect_only(path))["error"] == "EACCES"
    finally:
        st.stop()


def test_a_mode_outside_file_modes_is_a_config_error():
    from common.config import ConfigError

    with pytest.raises(ConfigError, match=r"agent_socket\.mode"):
        build({"agent_socket": {"mode": "17777"}})
