"""The verifier's decisions: one verdict per notice, a complete timeline, counters that add up."""
from __future__ import annotations

from functools import partial

import ujson
from hypothesis import given
from hypothesis import strategies as st

from common.notice import Notice
from common.wire import Escalation, decode_records
from tests.support import notices
from tests.support.drain_records import budget, record
from tests.support.fuzzing import fuzz
from verifier import core
from verifier.judge import PROGRESS_GRACE_S, Observation

T0 = 1_000_000.0
BUDGET = budget(checkpoint_s=10, evict_s=30, margin_s=5)


notice = partial(notices.notice, now=T0, node="me", received_in=0.4)


# The verifier's own read of the node, made after every report here, agreeing: empty and cordoned.
AGREES = Observation(T0 + 1e6, True, ())


def view(*notices: Notice, progress=None, progress_at=0.0, withdrawn=(), arrivals=None,
         seen: Observation | None = AGREES) -> core.View:
    """``progress``: notice id -> the fields of its drain record (on BUDGET, received with the notice)."""
    by_id = {n.id: n for n in notices}
    records = {nid: record(by_id.get(nid), budget=BUDGET, **fields) for nid, fields in (progress or {}).items()}
    return core.View(active=by_id, withdrawn=frozenset(withdrawn), progress=records,
                     progress_at=progress_at, budget=BUDGET, arrivals=arrivals or {}, seen=seen)


def run(state, v, times):
    """advance at each time; every emit, in order."""
    out = []
    for t in times:
        emits, _ = core.advance(state, v, T0 + t)
        out += emits
    return out


def verdicts(emits):
    return [e for e in emits if e.type in ("drain.done", "drain.overrun")]


def test_early_drain_is_done_with_the_whole_timeline():
    n = notice()
    progress = {"n1": {"state": "done", "remaining": [],
                       "steps": {"cordoned": T0 + 0.6, "clients_told": T0 + 0.7, "evicted": T0 + 4.0,
                                 "node_empty": T0 + 5.0},
                       "acks": {"trainer:42": ("checkpointed", T0 + 3.0)}}}
    state = core.new_state()
    emits = run(state, view(n, progress=progress, progress_at=T0 + 5.1,
                            arrivals={"n1": {"relay": T0 + 0.4, "metadata": T0 + 2.0}}), [5.2, 6.0, 50.0])
    (v,) = verdicts(emits)
    assert v.type == "drain.done" and v.data["outcome"] == "done"
    assert v.data["timeline_ms"] == {
        "issued": 0, "received": {"relay": 400, "metadata": 2000}, "cordoned": 600, "clients_told": 700,
        "checkpoint_acks": [{"client": "trainer:42", "status": "checkpointed", "ms": 3000}],
        "last_eviction": 4000, "node_empty": 5000, "verdict": 5200}
    assert emits[0].type == "verifier.clock_started"
    assert state["verdicts"]["n1"].outcome == "done"


def test_never_empty_is_overrun_at_the_cutoff_naming_what_was_left_and_the_step():
    n = notice()
    progress = {"n1": {"state": "running", "remaining": ["ns/a", "ns/b"],
                       "steps": {"cordoned": T0 + 0.6, "clients_told": T0 + 0.7, "evicted": T0 + 20.0}}}
    state = core.new_state()
    before = run(state, view(n, progress=progress, progress_at=T0 + 114.0), [1.0, 114.9])
    assert verdicts(before) == []
    (v,) = verdicts(run(state, view(n, progress=progress, progress_at=T0 + 115.2), [115.3, 116.0, 300.0]))
    assert v.type == "drain.overrun"
    assert (v.data["held_up_by"], v.data["left"], v.data["left_count"]) == ("evict", ["ns/a", "ns/b"], 2)
    assert v.data["timeline_ms"]["verdict"] == 115300 and "node_empty" not in v.data["timeline_ms"]


def test_escalations_are_announced_once_each_in_order():
    n = notice()
    state = core.new_state()
    emits = run(state, view(n), [1.0, 10.5, 11.0, 41.0, 41.5, 115.0, 116.0])
    levels = [e.data["escalation"] for e in emits if e.type == "drain.escalated"]
    assert levels == ["checkpoint_over", "evict_over", "final"]
    assert core.escalations(state, {"n1": n}) == {"n1": Escalation("final", T0 + 115.0)}


def test_a_done_notice_is_no_longer_escalated():
    n = notice()
    progress = {"n1": {"steps": {"cordoned": T0 + 1, "node_empty": T0 + 12}}}
    state = core.new_state()
    run(state, view(n, progress=progress, progress_at=T0 + 12), [10.5, 12.5])
    assert core.escalations(state, {"n1": n}) == {}


def test_withdrawn_before_its_verdict_gets_none():
    n = notice(deadline_in=20.0)
    state = core.new_state()
    run(state, view(n), [1.0])
    emits = run(state, view(withdrawn={"n1"}), [2.0, 100.0])
    assert verdicts(emits) == [] and "n1" not in state["clocks"]
    assert [e.type for e in emits] == ["verifier.clock_stopped"] and not emits[0].spool


def test_absent_but_not_withdrawn_keeps_its_clock():
    """A watcher that lost its state file re-learns the notice; the clock and escalations must not restart."""
    n = notice()
    state = core.new_state()
    run(state, view(n), [1.0, 11.0])
    assert run(state, view(), [12.0]) == []
    emits = run(state, view(n), [13.0])
    assert emits == [] and "n1" in state["clocks"]


def test_restart_at_any_point_gives_exactly_one_verdict():
    """The state survives a JSON round trip (the state file) before, across and after the cutoff."""
    n = notice(deadline_in=30.0)
    progress = {"n1": {"steps": {"cordoned": T0 + 1}, "remaining": ["ns/a"]}}
    all_emits = []
    state = core.new_state()
    for t in (1.0, 10.0, 24.0, 25.5, 26.0, 40.0, 41.0, 1000.0):
        state = core.normalize(ujson.loads(ujson.dumps(core.to_json(state))))   # a restart
        emits, _ = core.advance(state, view(n, progress=progress, progress_at=T0 + t), T0 + t)
        all_emits += emits
    assert [e.data["outcome"] for e in verdicts(all_emits)] == ["overrun"]


def test_verifier_down_across_the_cutoff_judges_on_restart():
    n = notice(deadline_in=30.0)
    progress = {"n1": {"steps": {"cordoned": T0 + 1, "clients_told": T0 + 2}, "remaining": ["ns/a"]}}
    state = core.new_state()
    run(state, view(n, progress=progress, progress_at=T0 + 2), [2.0])
    state = core.normalize(ujson.loads(ujson.dumps(state)))
    (v,) = verdicts(run(state, view(n, progress=progress, progress_at=T0 + 60), [60.0]))
    assert v.data["held_up_by"] == "checkpoint"


def test_clock_is_frozen_when_first_seen():
    """A contract arriving mid-drain does not move the cutoff the verifier announced."""
    n = notice(deadline_in=30.0)
    state = core.new_state()
    run(state, view(n), [1.0])
    later = core.View(active={"n1": n}, budget=budget(checkpoint_s=1, evict_s=1, margin_s=20))
    run(state, later, [15.0])
    assert state["clocks"]["n1"]["cutoff"] == T0 + 25.0
    assert not any(e.type == "drain.escalated" and e.data["escalation"] == "final" for e in run(state, later, [16.0]))


def test_the_drain_records_budget_moves_a_clock_started_on_the_contract():
    """Before the executor's record arrives the clock runs on the verifier's contract; the record says
    which budget the drain actually started with, and the verdict is judged on that one."""
    n = notice(deadline_in=120.0)
    state = core.new_state()
    run(state, view(n), [0.5])
    assert state["clocks"]["n1"]["cutoff"] == T0 + 115.0
    started_on = budget(checkpoint_s=40, evict_s=20, margin_s=30)
    progress = {"n1": record(n, budget=started_on, steps={"cordoned": T0 + 1}, remaining=["ns/a"])}
    emits = run(state, core.View(active={"n1": n}, progress=progress, progress_at=T0 + 2, budget=BUDGET), [2.0])
    assert [e.type for e in emits] == ["verifier.clock_rebased"] and not emits[0].spool
    assert (state["clocks"]["n1"]["checkpoint_at"], state["clocks"]["n1"]["cutoff"]) == (T0 + 40.4, T0 + 90.0)
    late = core.View(active={"n1": n}, progress=progress, progress_at=T0 + 93, budget=BUDGET)
    (v,) = verdicts(run(state, late, [93.0]))
    assert v.data["margin_s"] == 30 and v.data["held_up_by"] == "evict"


def test_counters_follow_what_happened():
    state = core.new_state()
    a, b = notice("a", deadline_in=20.0), notice("b", deadline_in=200.0, channel="metadata")
    progress = {"b": {"steps": {"cordoned": T0 + 1, "clients_told": T0 + 1.5, "node_empty": T0 + 3}}}
    run(state, view(a, b, progress=progress, progress_at=T0 + 20), [3.5, 15.0 + PROGRESS_GRACE_S])
    c = state["metrics"]["counters"]
    assert c["sco_agent_notices_total"] == {'kind="reclaim",channel="relay"': 1,
                                             'kind="reclaim",channel="metadata"': 1}
    assert c["sco_agent_verdicts_total"] == {'outcome="done",held_up_by="none"': 1,
                                              'outcome="overrun",held_up_by="cordon"': 1}
    h = state["metrics"]["histograms"]
    assert h["sco_agent_notice_to_empty_seconds"]["count"] == 1
    assert h["sco_agent_notice_to_cordoned_seconds"]["sum"] == 1.0


def test_rejections_counted_once_across_watcher_restarts():
    state = core.new_state()
    assert core.count_rejections(state, 1.0, {"rejected.bad_json": 2, "new.relay": 5})
    assert not core.count_rejections(state, 1.0, {"rejected.bad_json": 2})
    assert core.count_rejections(state, 1.0, {"rejected.bad_json": 3, "contract.rejected.bad_signature": 1})
    assert core.count_rejections(state, 2.0, {"rejected.bad_json": 1})       # a new watcher start
    assert not core.count_rejections(state, 2.0, "garbage")
    assert state["metrics"]["counters"]["sco_agent_rejections_total"] == {
        'what="notice",reason="bad_json"': 4, 'what="contract",reason="bad_signature"': 1}


def test_old_verdicts_of_gone_notices_are_forgotten():
    state = core.new_state()
    n = notice(deadline_in=20.0)
    run(state, view(n), [1.0, 20.0])
    run(state, view(withdrawn={"n1"}), [21.0])
    assert "n1" in state["verdicts"]
    run(state, view(), [core.VERDICT_MEMORY_S + 100])
    assert state["verdicts"] == {}


def test_normalize_repairs_garbage():
    assert core.normalize("nonsense") == core.new_state()
    s = core.normalize({"verdicts": [], "metrics": {"counters": 3}, "clocks": {"x": {}}, "unacked": {"e": 1}})
    assert s == core.new_state()


def test_event_data_never_shadows_the_log_record_fields():
    """Emits are logged as `log.info(type, **data)`: a data key like "level" would overwrite the record's own."""
    n = notice(deadline_in=20.0)
    state = core.new_state()
    emits = run(state, view(n, progress={"n1": {"steps": {}}}, progress_at=T0 + 20), [1.0, 11.0, 20.0])
    assert {"drain.escalated", "drain.overrun", "verifier.clock_started"} <= {e.type for e in emits}
    for e in emits:
        assert not {"ts", "level", "proc", "msg"} & set(e.data), e.type


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from([1e308, float('inf'), T0 + 1]) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=12)
FIELDS = st.fixed_dictionaries({}, optional={"state": JSON, "phase": JSON, "remaining": JSON, "acks": JSON,
                                             "steps": st.dictionaries(st.sampled_from(
                                                 ["cordoned", "node_empty", "evicted", "x"]), JSON) | JSON})


@fuzz(200)
@given(raw=st.dictionaries(st.sampled_from(["n1", "other"]), FIELDS | JSON, max_size=2), t=st.floats(0, 400))
def test_any_progress_message_is_judged_without_a_crash(raw, t):
    """Whatever the executor publishes (fields of a good record replaced by anything): the records the
    codec accepts are judged, the verifier keeps its clock and never raises."""
    state = core.new_state()
    n = notice()
    good = record(n, budget=BUDGET).to_dict()
    records, _ = decode_records({nid: {**good, **f} if isinstance(f, dict) else f for nid, f in raw.items()})
    v = core.View(active={"n1": n}, progress=records, progress_at=T0 + t, budget=BUDGET)
    core.advance(state, v, T0 + t)
    core.advance(state, v, T0 + t + 200)
    assert len(state["verdicts"]) == 1
    ujson.dumps(core.to_json(state))


def test_a_record_with_absurd_times_is_refused_not_overflowed():
    """A step time past the year 9999 would overflow the timeline (and the state file's JSON)."""
    good = record(notice(), budget=BUDGET, steps={"fallback": T0 + 2}, acks={"c": ("ok", -1e308)}).to_dict()
    raw = {"n1": dict(good, steps={"cordoned": 1e308}), "n2": dict(good, steps={"evicted": True}), "n3": good}
    records, refused = decode_records(raw)
    assert set(refused) == {"n1", "n2"} and "steps" in refused["n1"]
    assert records["n3"].steps == {"fallback": T0 + 2} and records["n3"].acks["c"].at == 0.0
