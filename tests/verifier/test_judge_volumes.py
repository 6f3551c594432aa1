"""Volumes gone before "done" (DESIGN section 9; issue 28, point 6): once the node is empty and the
verifier's own read agrees, "done" waits, within the margin after the node was empty (never past
the deadline), for the attached volumes no staying pod accounts for (verifier/volumes.py), and says
how long the detach took; when they outlast the margin the verdict is "volumes_attached", naming
them. A read with no volumes to speak of (Slurm: ``volumes=None``) is done at once, as before."""
from __future__ import annotations

import pytest

from tests.verifier.test_judge import CLOCK, EMPTY_AT_30
from verifier import volumes
from verifier.judge import Observation, judge, volumes_wait_until

VOL = "kubernetes.io/csi/ebs.csi.aws.com^vol-0a1"


def seen(at: float, pending: tuple[str, ...] | None, last_pending: float = 0.0) -> Observation:
    return Observation(at, True, (), volumes=pending, volumes_seen_at=last_pending)


def test_done_waits_for_an_attached_volume_and_says_how_long_it_took():
    assert judge(CLOCK, EMPTY_AT_30, 30.0, now=31.2, seen=seen(31.0, (VOL,), 31.0)) is None
    assert judge(CLOCK, EMPTY_AT_30, 30.0, now=33.2, seen=seen(33.0, (VOL,), 33.0)) is None
    v = judge(CLOCK, EMPTY_AT_30, 30.0, now=34.2, seen=seen(34.0, (), 33.0))
    assert v.outcome == "done" and v.detach_ms == 4000 and v.volumes == ()


def test_no_volume_to_wait_for_is_done_at_once_without_a_detach_time():
    v = judge(CLOCK, EMPTY_AT_30, 30.0, now=31.2, seen=seen(31.0, ()))
    assert v.outcome == "done" and v.detach_ms is None


def test_a_slurm_read_has_no_volumes_and_is_done_as_before():
    v = judge(CLOCK, EMPTY_AT_30, 30.0, now=31.2, seen=Observation(31.0, True, ()))
    assert v.outcome == "done" and v.detach_ms is None


def test_a_volume_still_attached_when_the_margin_ran_out_is_named_and_never_done():
    until = volumes_wait_until(CLOCK, 30.0)
    assert until == 30.0 + CLOCK.margin_s
    assert judge(CLOCK, EMPTY_AT_30, 30.0, now=until - 0.1, seen=seen(until - 0.3, (VOL,), until - 0.3)) is None
    v = judge(CLOCK, EMPTY_AT_30, 30.0, now=until, seen=seen(until - 0.3, (VOL,), until - 0.3))
    assert v.outcome == "volumes_attached" and v.volumes == (VOL,) and VOL in v.reason
    assert v.finished_at == 30.0


def test_the_wait_never_runs_past_the_deadline():
    """A node empty at the last moment that counts (the cutoff) waits the margin: to the deadline."""
    assert volumes_wait_until(CLOCK, CLOCK.cutoff) == CLOCK.deadline
    assert volumes_wait_until(CLOCK, CLOCK.cutoff - 1.0) == CLOCK.deadline - 1.0


NODE = {"status": {"volumesAttached": [{"name": "b", "devicePath": ""}, {"name": "a", "devicePath": ""}],
                   "volumesInUse": ["a"]}}
CLAIM_POD = {"spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]}}
PLAIN_POD = {"spec": {"volumes": [{"name": "s", "emptyDir": {}}]}}


def test_every_attached_volume_is_waited_for_when_no_staying_pod_mounts_one():
    attached, in_use = volumes.names(NODE)
    assert (attached, in_use) == (("a", "b"), ("a",))
    assert volumes.to_wait_for(attached, in_use, [PLAIN_POD]) == ("a", "b")


def test_a_staying_pod_that_mounts_a_claim_keeps_the_volumes_in_use_out_of_the_wait():
    assert volumes.to_wait_for(*volumes.names(NODE), [PLAIN_POD, CLAIM_POD]) == ("b",)


@pytest.mark.parametrize("status", [{"volumesAttached": "a"}, {"volumesAttached": [{"devicePath": ""}]},
                                    {"volumesInUse": [1]}, "not an object"])
def test_a_node_status_of_another_shape_is_refused_not_guessed_at(status):
    with pytest.raises(volumes.BadShape):
        volumes.names({"status": status})


def test_a_cordon_only_drain_evicted_nothing_and_waits_for_no_volume():
    import dataclasses

    from common.wire import DrainState
    rec = dataclasses.replace(EMPTY_AT_30, state=DrainState.CORDONED_ONLY, steps={"cordoned": 2.0})
    v = judge(CLOCK, rec, 30.0, now=3.2, seen=seen(3.0, (VOL,), 3.0))
    assert v.outcome == "cordoned" and v.detach_ms is None
