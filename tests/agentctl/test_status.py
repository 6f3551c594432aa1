"""`sco-agentctl status`: processes, contract, the active notice with its timeline so far, the last verdict."""
from __future__ import annotations

import time

import ujson

from agentctl import __main__ as ctl
from agentctl.status import AgentFiles, contract_view, parse_processes, render_text, summarize
from common.timefmt import format_rfc3339
from tests.support.agent_rig import write_config
from tests.support.drain_records import budget, record_dict

NOW = 1_800_000_000.0
NOTICE = {"id": "n1", "kind": "reclaim", "node": "node-a", "instance_id": "i-1",
          "issued_at": format_rfc3339(NOW - 10), "deadline": format_rfc3339(NOW + 110), "source": "aws",
          "channel": "relay", "received_at": NOW - 9.5, "detail": ""}
DRAINS = {"n1": record_dict(budget=budget(checkpoint_s=40, evict_s=50, margin_s=10), received_at=NOW - 9.5,
                           remaining=["ns/a", "ns/b"], steps={"cordoned": NOW - 9.0, "clients_told": NOW - 8.9},
                           acks={"job:1": ("checkpointed", NOW - 5.0)})}
VERIFIER = {"verdicts": {"old": {"notice_id": "old", "outcome": "overrun", "at": NOW - 3600, "held_up_by": "evict",
                                 "left": ["ns/z"], "left_count": 1, "timeline_ms": {"issued": 0, "node_empty": 125000}}}}
CONTRACT = {"serial": 7, "hall": "fra1", "drain": {"budget_s": 100, "checkpoint_s": 40, "evict_s": 50, "margin_s": 10}}
STATUS = {"source": "launch", "contract": CONTRACT}   # contract.json as watcher.contract_keeper writes it


def test_summary_and_text():
    s = summarize(node="node-a", hall="fra1",
                  processes=["executor                         RUNNING   pid 12, uptime 0:01:02",
                             "spool                            FATAL     Exited too quickly"],
                  files=AgentFiles(notices={"active": [NOTICE, {"id": "broken"}]}, contract=STATUS, drains=DRAINS,
                                   verifier=VERIFIER, spool={"fill_pct": 1.5, "unshipped_records": 3}),
                  now=NOW)
    (a,) = s["active"]
    assert a["timeline_ms"] == {"issued": 0, "received": {"relay": 500}, "cordoned": 1000, "clients_told": 1100,
                                "checkpoint_acks": [{"client": "job:1", "status": "checkpointed", "ms": 5000}]}
    assert (a["remaining_count"], a["cutoff_in_s"], a["escalation"]) == (2, 100.0, None)
    assert s["contract"]["serial"] == 7 and s["last_verdict"]["outcome"] == "overrun"
    text = render_text(s)
    for fragment in ("executor   RUNNING", "spool      FATAL", "contract: serial 7, budget 100 s",
                     "active notice: n1 reclaim via relay", "2 left: ns/a ns/b", "cordoned +1000",
                     "last verdict: old overrun", "held up by evict", "spool: fill_pct 1.5"):
        assert fragment in text, fragment


def test_nothing_known_renders_plainly():
    s = summarize(node="n", hall="h", processes=[], files=AgentFiles(), now=NOW)
    text = render_text(s)
    assert "active notice: none" in text and "last verdict: none" in text and "spool" not in text


def test_contract_as_the_watcher_writes_it():
    assert contract_view({"contract": CONTRACT})["serial"] == 7
    # The keeper never writes a bare contract or an envelope: neither is read as one.
    assert contract_view(CONTRACT) is None
    assert contract_view([1]) is None


def test_process_lines():
    assert parse_processes(["unix:///x/supervisor.sock no such file"]) == [
        {"name": "", "state": "", "detail": "unix:///x/supervisor.sock no such file"}]


def test_the_command_reads_the_agent_files(tmp_path, capsys, monkeypatch):
    run_dir, state_dir = tmp_path / "run", tmp_path / "state"
    run_dir.mkdir()
    state_dir.mkdir()
    now = time.time()
    notice = dict(NOTICE, issued_at=format_rfc3339(now - 10), deadline=format_rfc3339(now + 110),
                  received_at=now - 9.5)
    (state_dir / "notice.json").write_text(ujson.dumps({"active": [notice], "withdrawn": {}}))
    (run_dir / "contract.json").write_text(ujson.dumps(STATUS))
    (state_dir / "verdicts.json").write_text(ujson.dumps(VERIFIER))
    config = str(tmp_path / "agent.toml")
    write_config(config, {"node": {"name": "node-a"}, "paths": {"runtime_dir": str(run_dir),
                                                                "state_dir": str(state_dir)}})
    monkeypatch.setenv("SCO_AGENT_RUN_DIR", str(tmp_path / "sup"))     # no supervisord there
    monkeypatch.setenv("SCO_AGENT_LOG_DIR", str(tmp_path))
    assert ctl.main(["--config", config, "status"]) == 0
    out = capsys.readouterr().out
    assert "active notice: n1" in out and "contract: serial 7" in out and "last verdict: old overrun" in out
    assert ctl.main(["--config", config, "status", "--json"]) == 0
    doc = ujson.loads(capsys.readouterr().out)
    assert doc["active"][0]["id"] == "n1" and doc["contract"]["margin_s"] == 10


def test_status_shows_when_the_fallback_would_fire_has_fired_or_never_will():
    """Issue 16: the operator sees the fallback's moment (deadline - lead - margin), or why there is none."""
    def active(**fields):
        drains = {"n1": record_dict(received_at=NOW - 9.5, **{"steps": {"cordoned": NOW - 9.0}, **fields})}
        s = summarize(node="node-a", hall="fra1", processes=[], now=NOW,
                      files=AgentFiles(notices={"active": [NOTICE]}, drains=drains))
        return s["active"][0], render_text(s)

    a, text = active(fallback_allowed=True, fallback_lead_s=10.0)
    assert a["fallback"] == {"state": "armed", "at": format_rfc3339(NOW + 110 - 12), "in_s": 98.0, "lead_s": 10.0}
    assert f"fallback if the API server stays unreachable: at {format_rfc3339(NOW + 98)} (in 98.0 s" in text
    a, text = active(fallback_allowed=False, kind="rebalance")
    assert a["fallback"]["state"] == "never" and "no fallback (the contract allows no fallback for a rebalance" in text
    a, text = active(fallback_allowed=True, steps={"cordoned": NOW - 9.0, "fallback": NOW - 1.0})
    assert a["fallback"] == {"state": "ran", "at": format_rfc3339(NOW - 1.0)} and "fallback ran at" in text
    a, text = active(problem="403 Forbidden: nodes is forbidden")
    assert a["problem"] == "403 Forbidden: nodes is forbidden" and "configuration error: 403" in text


def test_status_shows_when_the_drain_starts_or_that_it_is_cordon_only():
    """Issue 28: per active notice, when its drain will start (deadline - budget), that it has, or that
    it never moves work (cordon only)."""
    maint = {**NOTICE, "id": "m1", "kind": "maintenance", "deadline": format_rfc3339(NOW + 86400)}

    def active(**fields):
        drains = {"m1": record_dict(received_at=NOW - 9.5, kind="maintenance",
                                    **{"steps": {"cordoned": NOW - 9.0}, **fields})}
        s = summarize(node="node-a", hall="fra1", processes=[], now=NOW,
                      files=AgentFiles(notices={"active": [maint]}, drains=drains))
        return s["active"][0], render_text(s)

    starts = NOW + 86400 - 25
    a, text = active(drain_start="deadline_minus_budget", state="waiting")
    assert a["start"] == {"state": "deferred", "at": format_rfc3339(starts), "in_s": 86375.0,
                          "rule": "deadline_minus_budget"}
    assert (f"drain: waiting; drain starts at {format_rfc3339(starts)} (in 86375.0 s, deadline - budget), "
            "the node cordoned meanwhile") in text
    a, text = active(drain_start="deadline_minus_budget", steps={"cordoned": NOW - 9.0, "deferred_started": NOW - 1})
    assert a["start"]["state"] == "started" and f"drain started at {format_rfc3339(NOW - 1)}" in text
    a, text = active()
    assert a["start"]["state"] == "started" and f"drain started at {format_rfc3339(NOW - 9.5)}" in text
    a, text = active(policy="cordon", state="cordoned_only")
    assert a["start"] == {"state": "cordon_only"} and "cordon only: the contract moves no work" in text
