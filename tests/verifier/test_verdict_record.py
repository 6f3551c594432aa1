"""The verdict record (common.verdict.VerdictRecord): one codec for verdicts.json and the verdict
events, read by the verifier and by ``sco-agentctl status`` alike (issue 26, point 9). A state file
written by the verifier of 0bc60c5 (tests/verifier/fixtures/make_verdicts.py, run on that commit)
is still read whole."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import ujson

from agentctl.status import AgentFiles, render_text, summarize
from common.verdict import Verdict, VerdictRecord, decode_verdict, decode_verdicts
from verifier import core

FIXTURE = Path(__file__).parent / "fixtures" / "verdicts-0bc60c5.json"
OLD = json.loads(FIXTURE.read_text())


def test_a_state_file_written_by_the_verifier_of_0bc60c5_reads_whole_and_writes_back_the_same():
    state, problems = core.load(OLD)
    assert problems == {}
    assert {nid: v.outcome for nid, v in state["verdicts"].items()} == {
        "n-done": "done", "n-overrun": "overrun", "n-dry": "dry_run", "n-unverified": "unverified"}
    over = state["verdicts"]["n-overrun"]
    assert (over.held_up_by, over.left, over.left_count) == ("evict", ("default/db-0", "default/web-1"), 2)
    assert state["verdicts"]["n-unverified"].reason.startswith("the executor reported the node empty")
    assert state["verdicts"]["n-done"].timeline_ms["checkpoint_acks"][0]["client"] == "job:7"
    # Written back, every verdict is what that verifier wrote, key for key.
    assert ujson.loads(ujson.dumps(core.to_json(state)))["verdicts"] == OLD["verdicts"]


def test_a_judged_notice_of_the_old_file_is_not_judged_again():
    state = core.normalize(OLD)
    assert not core.open_notices(state, dict.fromkeys(OLD["verdicts"]))   # type: ignore[misc]
    assert core.settled(state, "n-done") and not core.settled(state, "n-overrun")


def test_sco_agentctl_status_reads_the_old_file_through_the_codec():
    notices = {"active": [{"id": "n-overrun", "kind": "reclaim", "node": "node-a", "instance_id": "i-1",
                           "issued_at": OLD["verdicts"]["n-overrun"]["issued_at"],
                           "deadline": OLD["verdicts"]["n-overrun"]["deadline"], "source": "aws",
                           "channel": "relay", "received_at": OLD["clocks"]["n-overrun"]["received_at"]}]}
    s = summarize(node="node-a", hall="h1", processes=[], files=AgentFiles(notices=notices, verifier=OLD),
                  now=OLD["verdicts"]["n-unverified"]["at"] + 10)
    assert s["active"][0]["verdict"] == "overrun"
    last = s["last_verdict"]
    assert (last["notice_id"], last["outcome"], last["left"]) == ("n-unverified", "unverified", ["default/still-here"])
    assert "last verdict: n-unverified unverified" in render_text(s)


DAMAGED = {"outcome": "overrun", "notice_id": "n1", "at": "yesterday", "held_up_by": 7, "left": 5,
           "left_count": True, "timeline_ms": [], "late_ms": "x"}


def test_a_damaged_verdict_reads_field_by_field_and_says_which_fields():
    rec, bad = decode_verdict(DAMAGED)
    assert rec == VerdictRecord(outcome="overrun", notice_id="n1", at=0.0)
    assert set(bad) == {"at", "held_up_by", "left", "left_count", "timeline_ms", "late_ms"}
    records, problems = decode_verdicts({"n1": DAMAGED, "n2": 5, "n3": {"outcome": "maybe"}})
    assert list(records) == ["n1", "n3"] and records["n3"].outcome == ""
    assert problems["n2"] == "not an object: int" and "outcome" in problems["n3"]


@pytest.mark.parametrize("damaged", [DAMAGED, {"left": [1, None, "ns/a"]}, {"at": None, "left": None}, 5, []])
def test_sco_agentctl_status_shows_a_damaged_verdict_instead_of_crashing(damaged):
    s = summarize(node="node-a", hall="h1", processes=[], files=AgentFiles(verifier={"verdicts": {"n1": damaged}}),
                  now=1e9)
    render_text(s)
    assert s["last_verdict"] is None or s["last_verdict"]["notice_id"] in ("n1", "")


def test_the_record_is_the_verdict_and_what_it_was_judged_on():
    v = Verdict("overrun", "n1", 10.0, held_up_by="evict", left=tuple(f"ns/p{i}" for i in range(5)), reason="r")
    rec = VerdictRecord.of(v, max_left=2, kind="reclaim", channel="relay", timeline_ms={"issued": 0},
                           issued_at="a", cutoff="b", deadline="c", margin_s=5.0, late_ms=None)
    assert rec.left == ("ns/p0", "ns/p1") and rec.left_count == 5 and rec.verdict.reason == "r"
    d = rec.to_dict()
    assert "late_ms" not in d and d["left"] == ["ns/p0", "ns/p1"] and decode_verdict(d) == (rec, ())
