"""An ``extend`` grant in the eviction book: that client's pod waits until its grant ends --
past checkpoint_by and past the evict cutoff -- and every other pod moves as it would have."""
from __future__ import annotations

from executor.kube.book_records import Inputs
from executor.kube.pod_state import Answer
from tests.executor.kube.podspecs import pdb, pod
from tests.executor.kube.test_eviction_book import T0, D, book, names, send, uid
from tests.support.clocks import at


def test_an_extended_pod_waits_past_checkpoint_by_and_the_others_do_not():
    b = book([pod("slow"), pod("other")])
    grant = Inputs(held=frozenset({uid("slow")}), held_until={uid("slow"): D.checkpoint_by + 20})
    assert names(send(b, T0, grant)[0]) == ["other"]
    b.answer(uid("other"), Answer("accepted"), at(T0))
    assert names(send(b, D.checkpoint_by + 1, grant)[0]) == []      # the plain hold has ended; the grant has not
    assert b.holding(D.checkpoint_by + 1, grant)
    assert names(send(b, D.checkpoint_by + 20, grant)[0]) == ["slow"]


def test_a_grant_holds_past_the_evict_cutoff_and_the_escalation_for_that_pod_alone():
    b = book([pod("slow"), pod("late")])
    grant = Inputs(escalated=True, held_until={uid("slow"): D.evict_at + 5})
    assert names(send(b, D.evict_at, grant)[0]) == ["late"]          # escalated: everyone else at once
    assert names(send(b, D.evict_at + 4.9, grant)[0]) == []
    assert names(send(b, D.evict_at + 5, grant)[0]) == ["slow"]


def test_a_held_pod_does_not_hold_its_lane():
    """Pods under one PDB go one at a time; the extended one is stepped over, not waited for."""
    web = [pod(f"web-{i}", labels={"app": "web"}) for i in range(3)]
    b = book(web, [pdb("web", {"app": "web"})])
    grant = Inputs(held_until={uid("web-0"): D.checkpoint_by + 30})
    assert names(send(b, D.checkpoint_by, grant)[0]) == ["web-1"]


def test_without_a_grant_the_window_end_releases_the_pod():
    """The baseline the grant changes: at checkpoint_by a pod whose client has not acked goes."""
    b = book([pod("slow")])
    held = Inputs(held=frozenset({uid("slow")}))
    assert names(send(b, D.checkpoint_by, held)[0]) == ["slow"]


def test_an_extended_pod_is_said_held_once_so_the_verdict_can_name_it():
    """Issue 28, point 8: ``drain.pod_held`` with reason "extended" (the verdict's timeline lists
    the pod as extended, the Grafana panel counts it), once however many turns the grant holds."""
    from common.timefmt import format_rfc3339

    b = book([pod("slow"), pod("other")])
    grant = Inputs(held_until={uid("slow"): D.checkpoint_by + 20})
    _, emits = b.next_actions(at(T0), grant, 4)
    held = [e.data for e in emits if e.event == "drain.pod_held"]
    assert held == [{"pod": "default/slow", "uid": uid("slow"), "reason": "extended",
                     "until": format_rfc3339(D.checkpoint_by + 20), "lost": []}]
    _, emits = b.next_actions(at(T0 + 1), grant, 4)
    assert not [e for e in emits if e.event == "drain.pod_held"]
