"""common.contract: validation of the payload, the built-in contract, the published form."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from common.contract import BUILTIN, KINDS, Contract
from tests.support.contract_bundles import payload

MINIMAL = {
    "serial": 1,
    "hall": "fra1",
    "issued_at": "2026-11-29T12:00:00Z",
    "drain": {"budget_s": 60, "checkpoint_s": 20, "evict_s": 30, "margin_s": 10},
}


def test_full_payload_round_trips_through_to_dict() -> None:
    """to_dict is the payload form: from_payload(to_dict()) gives the same contract back."""
    c = Contract.from_payload(payload(9), source="launch")
    again = Contract.from_payload(c.to_dict(), source=c.source)
    assert again == c and again.source == "launch"
    assert c.drain.budget_s == 100 and c.slurm.signal == "SIGUSR1"  # 'USR1' normalised
    assert c.issued_at == 1795953600.0


def test_minimal_subset_takes_builtin_defaults() -> None:
    """Only serial, hall, issued_at and drain are required; the rest defaults to BUILTIN."""
    c = Contract.from_payload(MINIMAL)
    assert (c.taint_key, c.checkpoint_signal, c.pdb_blocked) == (
        BUILTIN.taint_key, BUILTIN.checkpoint_signal, BUILTIN.pdb_blocked)
    assert c.kinds == BUILTIN.kinds and c.slurm == BUILTIN.slurm and c.node_class == "*"


def test_partial_kind_policy_merges_over_builtin() -> None:
    """A bundle that changes one kind keeps the built-in choice for the others."""
    c = Contract.from_payload(dict(MINIMAL, kinds={"rebalance": "ignore"}))
    assert c.action_for("rebalance") == "ignore"
    assert c.action_for("reclaim") == "drain" and c.action_for("maintenance") == "drain"
    assert [k for k, _ in c.kinds] == list(KINDS)


def test_unknown_kind_drains() -> None:
    """A notice kind the contract does not know is drained: the safe side."""
    assert BUILTIN.action_for("something-new") == "drain"


def test_source_is_not_content() -> None:
    """Equality compares what the contract says, not where it came from."""
    assert Contract.from_payload(MINIMAL, "launch") == Contract.from_payload(MINIMAL, "bundle")


@pytest.mark.parametrize(("change", "field"), [
    ({"serial": True}, "'serial'"),
    ({"serial": -1}, "'serial'"),
    ({"serial": "7"}, "'serial'"),
    ({"hall": ""}, "'hall'"),
    ({"hall": "a b"}, "'hall'"),
    ({"issued_at": "yesterday"}, "'issued_at'"),
    ({"drain": {"budget_s": 0, "checkpoint_s": 0, "evict_s": 0, "margin_s": 0}}, "'drain.budget_s'"),
    ({"drain": {"budget_s": 30, "checkpoint_s": 20, "evict_s": 20, "margin_s": 0}}, "'drain'"),
    ({"drain": {"budget_s": 30, "checkpoint_s": 10, "evict_s": 10}}, "'drain.margin_s'"),
    ({"drain": {"budget_s": 30, "checkpoint_s": 1, "evict_s": 1, "margin_s": 1, "grace": 1}}, "'drain'"),
    ({"drain": [30]}, "'drain'"),
    ({"taint_key": "not a key"}, "'taint_key'"),
    ({"checkpoint_signal": "SIGKILL"}, "'checkpoint_signal'"),
    ({"kinds": {"cancel": "drain"}}, "'kinds'"),
    ({"kinds": {"reclaim": "evict"}}, "'kinds.reclaim'"),
    ({"pdb_blocked": "force"}, "'pdb_blocked'"),
    ({"exclude_from_lb": 1}, "'exclude_from_lb'"),
    ({"slurm": {"signal_scope": "all"}}, "'slurm.signal_scope'"),
    ({"slurm": {"on_drain": "kill"}}, "'slurm.on_drain'"),
    ({"sink_url": "ftp://x/"}, "'sink_url'"),
    ({"first_write_spread_ms": -1}, "'first_write_spread_ms'"),
    ({"first_write_spread_ms": 10_001}, "'first_write_spread_ms'"),
    ({"first_write_spread_ms": True}, "'first_write_spread_ms'"),
    ({"budget": 30}, "unknown key(s) ['budget']"),
    ({"fallback": []}, "'fallback'"),
    ({"fallback": {"kinds": "reclaim"}}, "'fallback.kinds'"),
    ({"fallback": {"kinds": ["cancel"]}}, "'fallback.kinds'"),
    ({"fallback": {"kinds": ["reclaim", "reclaim"]}}, "'fallback.kinds'"),
    ({"fallback": {"lead_s": -1}}, "'fallback.lead_s'"),
    ({"fallback": {"lead_s": True}}, "'fallback.lead_s'"),
    ({"fallback": {"lead_s": 3601}}, "'fallback.lead_s'"),
    ({"fallback": {"lead": 10}}, "'fallback'"),
    ({"kinds": {"live_migration": "evict"}}, "'kinds.live_migration'"),
])
def test_bad_field_is_named_in_the_error(change: dict, field: str) -> None:
    """Every invalid field raises ValueError naming that field."""
    with pytest.raises(ValueError, match="contract") as info:
        Contract.from_payload(dict(MINIMAL, **change))
    assert field in str(info.value)


def test_missing_required_field_is_named() -> None:
    for required in ("serial", "hall", "issued_at", "drain"):
        bad = {k: v for k, v in MINIMAL.items() if k != required}
        with pytest.raises(ValueError, match=f"'{required}': missing"):
            Contract.from_payload(bad)


def test_payload_must_be_an_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        Contract.from_payload([MINIMAL])


def test_builtin_fits_a_30_second_notice_seen_one_poll_late() -> None:
    """GCP/Azure give 30 s; the 5 s metadata poll may see it with 25 s left. All phases fit."""
    d = BUILTIN.drain
    assert d.budget_s <= 30 - 5
    assert d.checkpoint_s + d.evict_s + d.margin_s <= d.budget_s
    assert BUILTIN.source == "builtin" and BUILTIN.serial == 0


def test_builtin_round_trips_for_publishing() -> None:
    """Executor and verifier rebuild even the builtin contract from the published dict."""
    assert Contract.from_payload(BUILTIN.to_dict(), source="builtin") == BUILTIN


def test_import_does_not_load_cryptography_or_json() -> None:
    """Executor and verifier import this module: it must stay cheap."""
    code = ("import sys, common.contract; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('cryptography', 'json', 'ujson', 'logging')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"


def test_builtin_falls_back_only_for_a_reclaim_and_ignores_what_the_vm_survives() -> None:
    """Going around the scheduler powers the machine off: only where it is going away anyway. A
    live migration or a pause of seconds is not drained at all (issue 16)."""
    assert BUILTIN.fallback.kinds == ("reclaim",)
    assert BUILTIN.action_for("live_migration") == "ignore" and BUILTIN.action_for("pause") == "ignore"


def test_fallback_section_is_partial_and_round_trips() -> None:
    c = Contract.from_payload(dict(MINIMAL, fallback={"lead_s": 45}))
    assert (c.fallback.kinds, c.fallback.lead_s) == (("reclaim",), 45)
    c = Contract.from_payload(dict(MINIMAL, fallback={"kinds": ["reclaim", "maintenance"]},
                                   kinds={"live_migration": "drain"}))
    assert c.fallback.kinds == ("reclaim", "maintenance") and c.action_for("live_migration") == "drain"
    assert Contract.from_payload(c.to_dict()) == c
    assert Contract.from_payload(dict(MINIMAL, fallback={"kinds": []})).fallback.kinds == ()


def test_fallback_moment_leaves_the_lead_time_and_a_margin() -> None:
    from common.contract import FALLBACK_MARGIN_S, fallback_at

    assert fallback_at(100.0, 10) == 100.0 - 10 - FALLBACK_MARGIN_S


# -- when the drain starts, per kind (issue 28 point 2, DESIGN section 9) ----------------------

def test_builtin_start_reclaim_at_once_maintenance_at_deadline_minus_budget() -> None:
    """A reclaim drains at once; a maintenance window waits for deadline - budget_s; a contract that
    says nothing of starts (one signed before they existed) takes these."""
    for c in (BUILTIN, Contract.from_payload(MINIMAL)):
        assert c.start_for("reclaim") == "at_once"
        assert c.start_for("maintenance") == "deadline_minus_budget"
        assert c.start_for("rebalance") == "at_once"
    assert BUILTIN.start_for("something-new") == "at_once"


def test_partial_start_merges_over_builtin_and_round_trips() -> None:
    """A bundle that defers the reclaim (a CI hall) keeps the maintenance's deferred start."""
    c = Contract.from_payload(dict(MINIMAL, start={"reclaim": "deadline_minus_budget"}))
    assert c.start_for("reclaim") == "deadline_minus_budget" and c.start_for("maintenance") == "deadline_minus_budget"
    assert [k for k, _ in c.start] == list(KINDS)
    assert Contract.from_payload(c.to_dict()) == c
    assert c.to_dict()["start"]["reclaim"] == "deadline_minus_budget"
    assert Contract.from_payload(dict(MINIMAL, start={"maintenance": "at_once"})).start_for("maintenance") == "at_once"


@pytest.mark.parametrize(("start", "message"), [
    ("at_once", "contract field 'start': expected a JSON object"),
    ({"reclaim": "later"}, "contract field 'start.reclaim': expected one of at_once, deadline_minus_budget"),
    ({"reclaim": None}, "contract field 'start.reclaim': expected one of"),
    ({"reclaim": "cordon"}, "contract field 'start.reclaim': expected one of"),
    ({"cancel": "at_once"}, "contract field 'start': unknown key(s) ['cancel']"),
    ({"reclam": "at_once"}, "contract field 'start': unknown key(s) ['reclam']"),
])
def test_bad_start_is_refused_naming_the_field(start: object, message: str) -> None:
    """A misspelt kind or start is refused, never read as a default."""
    with pytest.raises(ValueError) as e:
        Contract.from_payload(dict(MINIMAL, start=start))
    assert message in str(e.value)
