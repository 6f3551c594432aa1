"""The records that cross processes (common/wire.py): one codec each, and one clock for everybody."""
from __future__ import annotations

import io
from functools import partial

import pytest
import ujson

from common.contract import BUILTIN, Contract
from common.log import Logger
from common.notice_state import decode_notice_state
from common.timefmt import format_rfc3339
from common.wire import (
    BadRecord,
    Budget,
    DrainRecord,
    Escalation,
    decode_escalations,
    encode_escalations,
    encode_records,
    phase_ends,
)
from executor import progress_file
from executor.drain import Drains
from executor.kube.scheduler import drain_spec
from executor.kube.scheduler import memo_problem as kube_memo
from executor.slurm.memo import memo_problem as slurm_memo
from executor.slurm.rules import phase_at
from tests.support import notices
from tests.support.drain_records import record
from verifier import core

T0 = 1_800_000_000.0
BUDGET = Budget(budget_s=70, checkpoint_s=10, evict_s=50, margin_s=10)


notice = partial(notices.notice, now=T0, deadline_in=100.0, received_in=0.5)


# -- the phase ends -------------------------------------------------------------------------

def test_phases_run_checkpoint_then_evict_then_margin_clamped_to_the_cutoff():
    d = phase_ends(100.0, 200.0, BUDGET)
    assert (d.checkpoint_by, d.evict_at, d.cutoff) == (110.0, 160.0, 190.0)
    short = phase_ends(100.0, 125.0, BUDGET)
    assert (short.checkpoint_by, short.evict_at, short.cutoff) == (110.0, 115.0, 115.0)
    late = phase_ends(100.0, 90.0, BUDGET)
    assert late.checkpoint_by == late.evict_at == late.cutoff == 80.0


def test_the_executor_and_the_verifier_time_a_notice_alike():
    """One notice, one contract: the drain core's order (what the Kubernetes runner and the Slurm
    rules drain by, and checkpoint_by as the clients hear it) and the verifier's clock agree."""
    contract = Contract.from_payload({"serial": 4, "hall": "h1", "issued_at": "2026-11-29T12:00:00Z",
                                      "drain": {"budget_s": 60, "checkpoint_s": 20, "evict_s": 25, "margin_s": 8}})
    n = notice(deadline_in=50.0)   # short: the evict phase is squeezed to the cutoff
    drains = Drains(None, None, QuietShell(), {})
    drains.contract, drains.contract_heard, drains.active = contract, True, {n.id: n}
    drains.turn(T0 + 1, 1.0)
    rec = drains.records[n.id]
    order = drains._order(n, rec)
    spec = drain_spec(order, _config())
    state = core.new_state()
    core.advance(state, core.View(active={n.id: n}, progress={n.id: rec}, progress_at=T0 + 1,
                                  budget=Budget.of(BUILTIN.drain)), T0 + 1)
    clock = state["clocks"][n.id]
    ends = order.ends
    assert (ends.checkpoint_by, ends.evict_at, ends.cutoff) == (T0 + 20.5, T0 + 42.0, T0 + 42.0)
    assert (clock["checkpoint_at"], clock["evict_at"], clock["cutoff"]) == (ends.checkpoint_by, ends.evict_at,
                                                                          ends.cutoff)
    assert spec.ends == ends
    assert [phase_at(ends, t, None) for t in (T0 + 20.4, T0 + 20.5, T0 + 42.0)] == ["checkpoint", "evict", "kill"]
    # What the agent socket's clients are told (once the node is cordoned).
    assert format_rfc3339(ends.checkpoint_by) == format_rfc3339(clock["checkpoint_at"])


class QuietShell:
    log = Logger("t", stream=io.StringIO())

    def emit(self, *args: object) -> None:
        pass

    def save(self) -> bool:
        return True

    def publish(self) -> None:
        pass


def _config():
    from common.config import build

    return build({"node": {"name": "node-a"}, "kubernetes": {"api_url": "http://127.0.0.1:1"}})


# -- the drain record -----------------------------------------------------------------------

# A record as the executor before common.wire wrote it to executor.json (Kubernetes and Slurm).
OLD_KUBE = {"kind": "reclaim", "state": "running", "steps": {"cordoned": T0 + 1, "evicted": T0 + 3},
            "received_at": T0 + 0.5, "remaining": ["ns/b"], "contract_serial": 3, "taint_key": "sco.io/notice",
            "policy": "drain", "budget": {"budget_s": 25, "checkpoint_s": 10, "evict_s": 10, "margin_s": 5},
            "pdb_blocked": "report", "exclude_from_lb": False, "evicted": {"uid-1": "ns/a"}, "deleted": {},
            "reported": [], "phase": "evict", "acks": {"job:7": {"status": "checkpointed", "at": T0 + 2}}}
OLD_SLURM = dict(OLD_KUBE, slurm={"policy": {"signal": "SIGTERM", "signal_scope": "full", "on_drain": "requeue"},
                                  "signalled": {"5": T0 + 1}, "evicted": {}, "refused": {}, "down_since": None,
                                  "local": {"checkpoint": {}, "term": {}, "kill": {}}})


def test_an_old_progress_file_loads_and_saves_in_the_same_shape(tmp_path):
    path = str(tmp_path / "executor.json")
    with open(path, "w") as f:
        f.write(ujson.dumps({"k": OLD_KUBE, "s": OLD_SLURM}))
    log = io.StringIO()
    records = progress_file.load(path, BUILTIN, Logger("t", stream=log), kube_memo)
    assert set(records) == {"k", "s"} and log.getvalue() == ""
    k = records["k"]
    assert (k.budget, k.acks["job:7"].status, k.memo["evicted"]) == (Budget(25, 10, 10, 5), "checkpointed",
                                                                    {"uid-1": "ns/a"})
    # Saved again, it keeps every field it had, and gains the fallback's, frozen from the contract
    # it is loaded with (a reclaim may fall back on the built-in contract).
    added = {"fallback_allowed": True, "fallback_lead_s": 10.0, "problem": "", "drain_start": "at_once"}
    assert encode_records(records) == {"k": {**OLD_KUBE, **added}, "s": {**OLD_SLURM, **added}}
    progress_file.save(path, records, Logger("t", stream=log))
    assert progress_file.load(path, BUILTIN, Logger("t", stream=log), slurm_memo)["s"].memo["slurm"]["signalled"] == {
        "5": T0 + 1}


def test_fields_an_older_executor_did_not_write_take_the_contracts_choices():
    old = {k: v for k, v in OLD_KUBE.items() if k not in ("pdb_blocked", "exclude_from_lb", "phase", "acks")}
    contract = Contract.from_payload({**BUILTIN.to_dict(), "hall": "h1", "pdb_blocked": "delete"})
    rec = DrainRecord.from_dict(old, contract)
    assert (rec.pdb_blocked, rec.exclude_from_lb, rec.phase, rec.acks) == ("delete", False, "", {})


@pytest.mark.parametrize(("change", "why"), [
    ({"state": 3}, "wrong type"), ({"received_at": float("inf")}, "received_at"),
    ({"steps": {"cordoned": 1e300}}, "steps"), ({"budget": {"budget_s": 25}}, "budget"),
    ({"budget": dict(OLD_KUBE["budget"], checkpoint_s=7200)}, "budget"), ({"remaining": "ns/a"}, "wrong type"),
    ({"contract_serial": True}, "wrong type"),
])
def test_a_record_that_cannot_be_resumed_is_refused_saying_why(change, why):
    with pytest.raises(BadRecord) as e:
        DrainRecord.from_dict(dict(OLD_KUBE, **change))
    assert why in str(e.value) and e.value.reason == "bad_shape"
    with pytest.raises(BadRecord, match="missing"):
        DrainRecord.from_dict({k: v for k, v in OLD_KUBE.items() if k != "kind"})


def test_the_schedulers_own_memory_is_checked_by_the_scheduler():
    assert kube_memo(OLD_KUBE) == "" and "evicted" in kube_memo({"evicted": []})
    assert slurm_memo(OLD_SLURM) == "" and slurm_memo({"slurm": {"policy": {}}}) == "slurm memo is malformed"
    with pytest.raises(BadRecord, match="slurm memo"):
        DrainRecord.from_dict(dict(OLD_SLURM, slurm=[]), memo_problem=slurm_memo)


def test_a_new_record_freezes_the_contracts_budget_and_choices():
    rec = DrainRecord.start(notice(), BUILTIN)
    assert (rec.budget, rec.policy, rec.contract_serial, rec.state) == (Budget(25, 10, 10, 5), "drain", 0, "running")
    assert DrainRecord.from_dict(ujson.loads(ujson.dumps(rec.to_dict()))) == rec
    assert record(notice(), remaining=[]).to_dict()["remaining"] == []


# -- the notice state and escalations -------------------------------------------------------

def test_the_notice_state_keeps_this_nodes_notices_and_refuses_bad_ones_alone():
    mine, everyone, other = notice("a"), notice("b", node="*"), notice("c", node="node-b")
    body = {"gen": 4, "active": [mine.to_dict(), everyone.to_dict(), other.to_dict(), {"id": "x"}],
            "withdrawn": ["w"], "arrivals": {"a": {"relay": T0, "pigeon": T0, "metadata": "soon"}},
            "counters": {"rejected.bad_json": 2, "flag": True}, "started_at": 5.0}
    state = decode_notice_state(body, "node-a")
    assert set(state.active) == {"a", "b"} and state.withdrawn == frozenset({"w"}) and len(state.refused) == 1
    assert (state.arrivals, state.counters, state.started_at, state.gen) == (
        {"a": {"relay": T0}}, {"rejected.bad_json": 2}, 5.0, 4)
    assert everyone.is_for("anything") and not other.is_for("node-a")
    with pytest.raises(BadRecord):
        decode_notice_state({"active": {"a": 1}}, "node-a")


def test_escalations_round_trip_and_unknown_levels_are_skipped():
    body = encode_escalations({"a": Escalation("checkpoint_over", 1.0), "b": Escalation("final", 2.0)})
    assert decode_escalations(body) == {"a": "checkpoint_over", "b": "final"}
    assert decode_escalations({"notices": {"c": {"level": "panic"}, "d": 7, "e": "evict_over"}}) == {"e": "evict_over"}
    with pytest.raises(ValueError):
        decode_escalations({"notices": []})
