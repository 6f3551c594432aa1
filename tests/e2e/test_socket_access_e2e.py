"""An unprivileged workload and the whole agent: with the shipped socket mode a client running as
``nobody`` reaches the socket in its own directory, hears the notice and its ack is recorded under
its own uid (SO_PEERCRED)."""
from __future__ import annotations

import os
import pwd
import shutil
import tempfile

from tests.support.agent_socket import RawClient, as_user
from tests.support.stack import Stack
from tests.support.wait import wait_for


def test_a_client_running_as_nobody_is_told_and_its_ack_lands(tmp_path):
    nobody = pwd.getpwnam("nobody")
    # Like /run: searchable by all (a pytest tmp_path sits under a 0700 directory).
    base = tempfile.mkdtemp(prefix="sco-run-", dir="/tmp")
    os.chmod(base, 0o755)
    path = os.path.join(base, "sco-agent-socket", "agent.sock")
    try:
        with Stack(str(tmp_path), contract={"budget_s": 60, "checkpoint_s": 20, "evict_s": 20, "margin_s": 5},
                   settings={"agent_socket": {"path": path}}) as s:
            wait_for(lambda: os.path.exists(path), 10, "agent socket")
            doc = s.publish_notice(deadline_in=60)
            s.wait_event("drain.clients_told", doc["id"])

            def session() -> dict:
                c = RawClient(path)
                reply = c.register("nobody-worker")
                notice = c.read_op("notice", timeout=30)   # active already: sent at registration
                c.send({"op": "ack", "id": notice["id"], "status": "checkpointed"})
                return {"registered": reply, "notice": notice, "acked": c.read_op("acked")}

            result = as_user("nobody", session, timeout=60)
            assert "error" not in result, result
            assert result["registered"]["uid"] == nobody.pw_uid
            assert result["notice"]["id"] == doc["id"] and result["acked"]["status"] == "checkpointed"
            ack = s.wait_event("drain.checkpoint_acked", doc["id"])
            assert ack["data"]["uid"] == nobody.pw_uid and ack["data"]["client"] == "nobody-worker"
            assert "agent_socket.unreachable" not in s.agent.log("executor")
    finally:
        shutil.rmtree(base, ignore_errors=True)
