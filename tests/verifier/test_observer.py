"""The verifier's own read of the scheduler runs in a supervised thread: an exception it does not
expect restarts it (with a pause, counted), and the verdict afterwards is a real one, not
``unverified`` for want of a read (issue 26, point 7)."""
from __future__ import annotations

import io
import time

import pytest
import ujson

from common.log import Logger
from common.notice import Notice
from common.supervise import report
from tests.support.drain_records import budget, record
from tests.support.wait import wait_for
from verifier.judge import judge, start_clock
from verifier.scheduler_read import KubeReader, Observer, ReadError


class Reader:
    """A reader whose read fails the way a bug does (an exception nobody catches) ``fails`` times."""

    made = 0

    def __init__(self, fails: int) -> None:
        Reader.made += 1
        self.fails = fails
        self.closed = False

    def read(self) -> tuple[bool, tuple[str, ...]]:
        if Reader.made <= self.fails:
            # What a 200 whose node "spec" is a list did to the Kubernetes reader.
            raise AttributeError("'list' object has no attribute 'get'")
        return True, ()

    def close(self) -> None:
        self.closed = True


def test_a_reader_that_dies_of_an_unexpected_exception_is_restarted_and_the_drain_is_judged_done():
    Reader.made = 0
    readers: list[Reader] = []

    def make() -> Reader:
        readers.append(Reader(fails=2))
        return readers[-1]

    observer = Observer(make)   # type: ignore[arg-type]
    n = Notice(id="n1", kind="reclaim", node="me", instance_id="", issued_at=time.time() - 1,
               deadline=time.time() + 60, source="aws", received_at=time.time() - 1)
    b = budget(checkpoint_s=5, evict_s=20, margin_s=5)
    clock = start_clock(n, b)
    reported = time.time()
    rec = record(n, budget=b, steps={"cordoned": reported - 0.5, "node_empty": reported}, remaining=[])
    observer.want(True)
    try:
        # Meanwhile, the read is known to have crashed: a verdict given now would say why.
        wait_for(lambda: observer.latest is not None, 10, "a first observation")
        seen = wait_for(lambda: observer.latest if observer.latest is not None and observer.latest.left == ()
                        else None, 15, "a good read after the restarts")
        assert observer.worker is not None and observer.worker.restarts == 2
        assert all(r.closed for r in readers[:2])   # a crashed reader is closed, a new one made
        verdict = judge(clock, rec, reported, time.time(), seen=seen)
        assert verdict is not None and verdict.outcome == "done", verdict
        out, events = io.StringIO(), []
        assert report(observer.worker, Logger("verifier", stream=out), lambda t, data: events.append(t)) == 2
        assert events == ["agent.thread_restarted"] * 2
        assert [ujson.loads(x)["pause_s"] for x in out.getvalue().splitlines()] == [0.5, 1.0]
    finally:
        observer.stop()
    assert observer.worker.join(5)


def test_while_the_reader_is_down_a_verdict_names_the_crash():
    Reader.made = 0
    observer = Observer(lambda: Reader(fails=10**6))   # type: ignore[arg-type,return-value]
    observer.want(True)
    try:
        seen = wait_for(lambda: observer.latest, 10, "the crash as an observation")
        assert seen.left is None and "the verifier's read crashed: AttributeError" in seen.error
    finally:
        observer.stop()


def kube_reader(node: dict, pods: dict) -> KubeReader:
    """A KubeReader whose server answers ``node`` and ``pods`` (its HTTP left out)."""
    r = KubeReader.__new__(KubeReader)
    r.node = "me"
    r._get = lambda path: node if path.startswith("/api/v1/nodes/") else pods   # type: ignore[method-assign]
    return r


GOOD_POD = {"metadata": {"namespace": "ns", "name": "p", "ownerReferences": [{"kind": "ReplicaSet"}]},
            "spec": {"nodeName": "me"}, "status": {"phase": "Running"}}


@pytest.mark.parametrize(("node", "pods"), [
    ({"spec": ["x"]}, {"items": []}),
    ({"spec": {}}, {"items": {"a": 1}}),
    ({"spec": {}}, {"items": [], "metadata": ["x"]}),
    ({"spec": {}}, {"items": ["pod"]}),
    ({"spec": {}}, {"items": [{**GOOD_POD, "status": "Running"}]}),
    ({"spec": {}}, {"items": [{**GOOD_POD, "spec": [1]}]}),
    ({"spec": {}}, {"items": [{**GOOD_POD, "metadata": {"annotations": ["a"]}}]}),
    ({"spec": {}}, {"items": [{**GOOD_POD, "metadata": {"ownerReferences": ["DaemonSet"]}}]}),
])
def test_an_answer_of_the_wrong_shape_is_a_refused_read_not_an_exception(node, pods):
    with pytest.raises(ReadError):
        kube_reader(node, pods).read()


def test_the_right_shapes_read_as_before():
    assert kube_reader({"spec": {"unschedulable": True}}, {"items": [GOOD_POD], "metadata": {}}).read() == \
        (True, ("ns/p",))
    assert kube_reader({"spec": None}, {"items": None, "metadata": None}).read() == (False, ())


def test_the_node_read_says_which_attached_volumes_a_drain_still_waits_for():
    """Issue 28, point 6: the same GET of the node, no request added; a volume list of the wrong
    shape refuses the read."""
    node = {"spec": {}, "status": {"volumesAttached": [{"name": "v1", "devicePath": ""}], "volumesInUse": []}}
    reader = kube_reader(node, {"items": [GOOD_POD], "metadata": {}})
    reader.read()
    assert reader.volumes == ("v1",)
    with pytest.raises(ReadError):
        kube_reader({"spec": {}, "status": {"volumesAttached": "v1"}}, {"items": []}).read()


class VolumeReader:
    """A Kubernetes reader whose node still has a volume attached for its first ``attached`` reads."""

    def __init__(self, attached: int) -> None:
        self.left, self.skipped, self.volumes = attached, (), ("v1",)

    def read(self) -> tuple[bool, tuple[str, ...]]:
        self.volumes = ("v1",) if self.left > 0 else ()
        self.left -= 1
        return True, ()

    def close(self) -> None:
        pass


def test_the_observer_says_when_it_last_saw_a_volume_to_wait_for_and_a_slurm_read_has_none():
    seen_kube = Observer(lambda: VolumeReader(attached=2))
    seen_kube.want(True)
    first = wait_for(lambda: seen_kube.latest, 5, "a read")
    assert first.volumes == ("v1",) and first.volumes_seen_at == first.at
    gone = wait_for(lambda: seen_kube.latest if seen_kube.latest.volumes == () else None, 10, "the volume gone")
    assert 0 < gone.volumes_seen_at < gone.at
    seen_kube.stop()
    slurm_like = Observer(lambda: Reader(fails=0))     # no ``volumes``: a Slurm reader's read
    Reader.made = 0
    slurm_like.want(True)
    latest = wait_for(lambda: slurm_like.latest, 5, "a read")
    assert latest.volumes is None and latest.volumes_seen_at == 0.0
    slurm_like.stop()
