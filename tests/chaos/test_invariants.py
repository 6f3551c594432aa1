"""The chaos run's pure parts: each invariant catches what it is meant to, and plans are what they say."""
from __future__ import annotations

import random

from tests.chaos import invariants
from tests.chaos.invariants import Observed
from tests.chaos.plan import (
    FAULT_END_S,
    KUBE_KINDS,
    LONG_OUTAGE,
    RELAY_LOSERS,
    Fault,
    Timing,
    draw_fault,
    long_outage,
    plan_run,
    plan_slurm_run,
    spread,
)

T = Timing()


def verdict(kind: str, nid: str = "n1", event_id: str = "e1", **data) -> dict:
    return {"event_id": event_id, "type": f"drain.{kind}", "notice_id": nid, "data": data}


def eviction(name: str, uid: str, status: int = 201) -> dict:
    return {"method": "POST", "path": f"/api/v1/namespaces/default/pods/{name}/eviction", "status": status,
            "body": {"kind": "Eviction", "deleteOptions": {"preconditions": {"uid": uid}}}}


def test_one_done_verdict_on_an_empty_cordoned_node_is_clean():
    assert invariants.check(Observed("n1", (verdict("done"),), False, True, ())) == []


def test_no_verdict_and_two_verdicts_are_violations_but_a_resend_is_one_verdict():
    assert invariants.check(Observed("n1", (), False, True, ()))
    two = invariants.verdicts_of([verdict("done"), verdict("done", event_id="e2")], "n1")
    assert len(two) == 2 and invariants.check(Observed("n1", two, False, True, ()))
    resent = invariants.verdicts_of([verdict("done"), verdict("done"), verdict("done", nid="n2")], "n1")
    assert len(resent) == 1


def test_done_must_leave_the_node_cordoned_and_empty():
    assert invariants.check(Observed("n1", (verdict("done"),), False, False, ()))
    assert invariants.check(Observed("n1", (verdict("done"),), False, True, ("default/web-0",)))


def test_overrun_needs_a_legitimate_fault_and_a_reason():
    held = verdict("overrun", held_up_by="evict", left=["default/web-0"])
    assert invariants.check(Observed("n1", (held,), True, False, ("default/web-0",))) == []
    assert invariants.check(Observed("n1", (held,), False, True, ()))
    assert invariants.check(Observed("n1", (verdict("overrun"),), True, True, ()))


def test_scheduler_specific_findings_are_violations_too():
    assert invariants.check(Observed("n1", (verdict("done"),), False, True, (), ("signalled twice",))) == [
        "signalled twice"]


def test_a_second_accepted_eviction_of_one_uid_is_caught_but_retries_are_not():
    log = [eviction("web-0", "u0", 429), eviction("web-0", "u0", 201), eviction("web-1", "u1", 201),
           eviction("web-1", "u1b", 201)]   # same name, new pod: fine
    assert invariants.duplicate_evictions(log) == []
    assert invariants.duplicate_evictions(log + [eviction("web-0", "u0", 201)]) == [
        "pod default/web-0 (uid u0) evicted 2 times"]


def test_writes_to_another_node_or_its_pods_are_caught_reads_are_not():
    own = {"default/web-0"}
    log = [{"method": "PATCH", "path": "/api/v1/nodes/node-a", "status": 200},
           {"method": "GET", "path": "/api/v1/nodes/node-b", "status": 200},
           {"method": "GET", "path": "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", "status": 200},
           eviction("web-0", "u0")]
    assert invariants.foreign_writes(log, "node-a", own) == []
    bad = [{"method": "PATCH", "path": "/api/v1/nodes/node-b", "status": 200}, eviction("bystander-0", "u9"),
           {"method": "DELETE", "path": "/api/v1/namespaces/default/pods/bystander-1", "status": 200}]
    assert len(invariants.foreign_writes(log + bad, "node-a", own)) == 3


def test_lost_events_and_verdict_counts_over_the_whole_run():
    assert invariants.lost_events(["a", "b", "c"], ["c", "a", "a"]) == {"b"}
    events = [verdict("done", "n1", "e1"), verdict("done", "n1", "e1"), verdict("overrun", "n2", "e2"),
              verdict("done", "n2", "e3")]
    assert invariants.verdict_counts(events, ["n1", "n2", "n3"]) == {"n1": 1, "n2": 2, "n3": 0}


def test_plans_repeat_for_a_seed_and_differ_between_seeds():
    assert plan_run(11, 20) == plan_run(11, 20)
    assert plan_run(11, 20) != plan_run(12, 20)
    assert plan_slurm_run(3, 5, T) == plan_slurm_run(3, 5, T)


def test_no_two_faults_on_one_target_overlap_and_bounded_faults_end_in_time():
    for plan in plan_run(5, 300):
        for a in plan.faults:
            assert a.kind == LONG_OUTAGE or a.end <= FAULT_END_S < T.cutoff_s
            for b in plan.faults:
                if a is not b and a.target == b.target and a.at <= b.at:
                    assert a.end < b.at, plan


def test_spread_moves_a_clash_after_the_first_fault_or_drops_it():
    out = spread([Fault("api_500", 1.0, 3.0), Fault("api_down", 2.0, 2.0), Fault("api_429", 2.5, 9.0)])
    assert [f.kind for f in out] == ["api_500", "api_down"] and out[1].at == 4.5


def test_only_a_long_api_outage_makes_an_overrun_legitimate():
    plans = plan_run(7, 400)
    for plan in plans:
        assert plan.overrun_allowed() == any(f.kind == LONG_OUTAGE for f in plan.faults)
    assert long_outage(1.0, T).end > T.cutoff_s
    assert any(p.overrun_allowed() for p in plans) and not all(p.overrun_allowed() for p in plans)


def test_every_kind_is_drawn_and_a_relay_only_notice_never_races_a_lost_subscriber():
    plans = plan_run(3, 400)
    assert {f.kind for p in plans for f in p.faults} == {*KUBE_KINDS, LONG_OUTAGE}
    for p in plans:
        if p.channel == "relay":
            assert not any(f.kind in RELAY_LOSERS and f.at < 1.5 for f in p.faults)


def test_faults_start_early_more_often_than_late():
    rng = random.Random(1)
    starts = [draw_fault(rng, KUBE_KINDS).at for _ in range(2000)]
    assert sum(a < 4.0 for a in starts) > 1.5 * sum(a >= 4.0 for a in starts)


def test_a_step_announced_twice_is_caught_a_resend_and_other_pods_are_not():
    def ev(type_: str, eid: str, nid: str = "n1", **data) -> dict:
        return {"event_id": eid, "type": type_, "notice_id": nid, "data": data}

    clean = [ev("drain.cordoned", "e1"), ev("drain.cordoned", "e1"), ev("drain.cordoned", "e2", "n2"),
             ev("drain.evicted", "e3", uid="u1"), ev("drain.evicted", "e4", uid="u2"),
             ev("drain.escalated", "e5", escalation="final"), ev("drain.reconciled", "e6"), ev("drain.reconciled", "e7"),
             ev("drain.fallback", "e11", phase="checkpoint"), ev("drain.fallback", "e12", phase="evict")]
    assert invariants.repeated_steps(clean, ["n1", "n2"]) == []
    twice = clean + [ev("drain.uncordoned", "e8"), ev("drain.uncordoned", "e9"), ev("drain.evicted", "e10", uid="u1"),
                     ev("drain.fallback", "e13", "n2"), ev("drain.fallback", "e14", "n2")]
    assert invariants.repeated_steps(twice, ["n1", "n2"]) == [
        "n1: drain.evicted u1 announced 2 times", "n1: drain.uncordoned announced 2 times",
        "n2: drain.fallback None announced 2 times"]


def test_counting_from_emission_accounts_for_delivered_poisoned_and_dropped():
    lines = ['{"ts":1,"msg":"event.emitted","event_id":"a","type":"drain.started"}', "not json",
             '{"msg":"event.emitted","event_id":"b"}', '{"msg":"drain.started","event_id":"x"}',
             '{"msg":"event.emitted","event_id":"c"}', '{"msg":"event.emitted","event_id":"d"}']
    emitted = invariants.emitted_ids(lines)
    assert emitted == ["a", "b", "c", "d"]
    received = [{"event_id": "a"}, {"event_id": "a"},
                {"event_id": "p1", "type": "spool.poison", "data": {"event_id": "b"}}]
    whole = invariants.from_emission(emitted, received)
    assert (whole.emitted, whole.delivered, whole.poisoned, whole.dropped) == (4, 1, 1, 0)
    assert whole.missing == ("c", "d") and whole.unaccounted == 2            # lost without a word
    dropped = {"event_id": "d1", "type": "spool.dropped", "data": {"dropped": 2}}
    accounted = invariants.from_emission(emitted, [*received, dropped, dropped])   # a resent report counts once
    assert accounted.dropped == 2 and accounted.unaccounted == 0
    assert invariants.from_emission(emitted, [{"event_id": e} for e in "abcd"]).missing == ()
