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
