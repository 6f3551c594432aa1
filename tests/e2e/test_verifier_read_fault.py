"""The verifier's own read of the node meets an answer it did not foresee (issue 26, point 7): the
whole agent under a real supervisord, the emulated API server answering the verifier's node reads
with a 200 whose ``spec`` is a list. The read used to end the verifier's reading thread for good
(an AttributeError nobody caught), so the drain, empty on time, was judged ``unverified``: "no read
of the scheduler by the verifier since the executor reported". Now the answer is a refused read,
and the next good read confirms the node empty: ``done``."""
from __future__ import annotations

from tests.support.stack import NODE, Stack
from tests.support.wait import wait_for


def test_a_node_read_of_the_wrong_shape_is_refused_and_the_drain_is_still_judged_done(tmp_path):
    with Stack(str(tmp_path)) as s:
        s.kube.add_pod("app", NODE, owner=("ReplicaSet", "app"), terminate_after=3)
        doc = s.publish_notice(deadline_in=40)
        s.wait_event("drain.cordoned", doc["id"], timeout=20)
        # The executor has read the node to cordon it; from here on, only the verifier GETs it.
        s.kube.fault("status", path=f"/api/v1/nodes/{NODE}", method="GET", status=200, count=3,
                     body={"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE}, "spec": ["hostile"]})
        verdict = wait_for(lambda: (s.events_of("drain.done", doc["id"]) + s.events_of("drain.unverified", doc["id"])
                                    + s.events_of("drain.overrun", doc["id"]) or [None])[0], 45, "a verdict")
        assert verdict["type"] == "drain.done", verdict["data"]
        fired = [r for r in s.kube.requests(f"/api/v1/nodes/{NODE}") if r["fault"] == "status"]
        assert len(fired) == 3 and all("sco-agent-verifier" in str(r["headers"]) for r in fired), fired
        assert s.agent.status()["verifier"][0] == "RUNNING"


# Loaded by every interpreter of the agent (supervisord's, hence every worker it forks): the
# verifier's reader raises an exception no code path expects, once per marker file created.
FAULT = '''
import os
marker = os.environ.get("SCO_TEST_READER_FAULT")
if marker:
    import verifier.scheduler_read as _sr
    _real = _sr.KubeReader.read
    def _read(self):
        try:
            os.unlink(marker)
        except FileNotFoundError:
            return _real(self)
        raise RuntimeError("injected: a bug in the verifier's read")
    _sr.KubeReader.read = _read
'''


def test_the_verifiers_reader_killed_by_a_fault_is_restarted_and_the_drain_judged_done(tmp_path):
    """The reading thread itself dies (an exception nobody catches, injected into the real verifier
    under supervisord): it used to stay dead, and the drain, empty on time, was judged unverified.
    Now it is restarted after its pause, says so (agent.thread_restarted in the spool), and the
    next read confirms the node empty: done."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(FAULT)
    marker = tmp_path / "fault-armed"
    env = {"PYTHONPATH": str(inject), "SCO_TEST_READER_FAULT": str(marker)}
    with Stack(str(tmp_path / "stack"), env=env) as s:
        verifier_pid = s.agent.pid("verifier")
        s.kube.add_pod("app", NODE, owner=("ReplicaSet", "app"), terminate_after=3)
        doc = s.publish_notice(deadline_in=40)
        s.wait_event("drain.cordoned", doc["id"], timeout=20)
        marker.touch()
        restarted = s.wait_event("agent.thread_restarted", timeout=20)
        assert restarted["data"]["thread"] == "verifier-read" and "injected" in restarted["data"]["error"]
        assert not marker.exists()
        verdict = wait_for(lambda: (s.events_of("drain.done", doc["id"]) + s.events_of("drain.unverified", doc["id"])
                                    + s.events_of("drain.overrun", doc["id"]) or [None])[0], 45, "a verdict")
        assert verdict["type"] == "drain.done", verdict["data"]
        assert s.agent.pid("verifier") == verifier_pid   # the thread restarted, not the process
