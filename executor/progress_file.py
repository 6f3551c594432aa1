"""Which drain records in the executor's progress file (``executor.json``) a restart can resume.

The executor reads every field of a record without further checks while it
drains, so a record is checked whole when the file is loaded: a field of the
wrong type (a hand edit, another version, a disk returning garbage) would
otherwise crash the executor one step later -- and a restart reads the same
file again: a crash loop. A record that fails is set aside (logged); its
drain is re-derived from the cluster, so only step timestamps are lost.
"""
from __future__ import annotations

import math
from typing import Any

import ujson

from common.contract import MAX_BUDGET_S, Contract
from common.log import Logger
from common.timefmt import MAX_EPOCH, MIN_EPOCH

MAX_FILE = 4 << 20

REQUIRED = ("kind", "state", "steps", "received_at", "policy", "taint_key", "budget")
BUDGET_KEYS = ("budget_s", "checkpoint_s", "evict_s", "margin_s")
_TEXT = ("kind", "state", "policy", "taint_key")
_OPTIONAL_TYPES: dict[str, tuple[type, ...]] = {
    "phase": (str,), "remaining": (list, type(None)), "evicted": (dict,), "deleted": (dict,),
    "reported": (list,), "acks": (dict,), "pdb_blocked": (str,), "exclude_from_lb": (bool,),
    "slurm": (dict,),
}


def load(path: str, contract: Contract, log: Logger) -> dict[str, dict[str, Any]]:
    """The records of the file at ``path`` that can be resumed; {} when there is none or it is unreadable."""
    try:
        with open(path, "rb") as f:
            doc = ujson.loads(f.read(MAX_FILE))
    except FileNotFoundError:
        return {}
    except (ValueError, OSError) as e:
        log.error("state.corrupt", path=path, error=str(e)[:300])
        return {}
    if not isinstance(doc, dict):
        log.error("state.corrupt", path=path, error="not a JSON object")
        return {}
    kept = {}
    for nid, rec in doc.items():
        why = problem(rec)
        if why:
            log.error("state.record_dropped", notice_id=str(nid)[:200], reason=why)
        else:
            kept[nid] = complete(rec, contract)
    return kept


def complete(rec: dict[str, Any], contract: Contract) -> dict[str, Any]:
    """Fill keys a record from an older executor lacks (the current contract's choices)."""
    rec.setdefault("pdb_blocked", contract.pdb_blocked)
    rec.setdefault("exclude_from_lb", contract.exclude_from_lb)
    for key in ("evicted", "deleted"):   # pod uid -> namespace/name
        if not isinstance(rec.get(key), dict):
            rec[key] = {}
    if not isinstance(rec.get("reported"), list):
        rec["reported"] = []
    return rec


def problem(rec: Any) -> str:
    """Why ``rec`` cannot be resumed, or "" if it can."""
    if not isinstance(rec, dict):
        return "not an object"
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        return f"missing {missing}"
    bad = [k for k in _TEXT if not isinstance(rec[k], str)]
    bad += [k for k, types in _OPTIONAL_TYPES.items() if k in rec and not isinstance(rec[k], types)]
    if bad:
        return f"wrong type: {bad}"
    if not (_number(rec["received_at"]) and MIN_EPOCH <= rec["received_at"] < MAX_EPOCH):
        return "received_at is not a time"
    steps, budget = rec["steps"], rec["budget"]
    if not isinstance(steps, dict) or not all(_number(t) for t in steps.values()):
        return "steps must map step names to times"
    # A contract's budget is at most MAX_BUDGET_S: a larger one would push the times computed from
    # it (checkpoint_by, the cutoffs) out of what can be written down.
    if not isinstance(budget, dict) or not all(_number(budget.get(k)) and 0 <= budget[k] <= MAX_BUDGET_S
                                               for k in BUDGET_KEYS):
        return f"budget must hold {BUDGET_KEYS}, each 0..{MAX_BUDGET_S} s"
    if "slurm" in rec and not _slurm_memo(rec["slurm"]):
        return "slurm memo is malformed"
    return ""


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _slurm_memo(memo: dict[str, Any]) -> bool:
    """The shape ``executor.slurm_rules.new_memo`` gives: job tables keyed by job id."""
    policy, local = memo.get("policy"), memo.get("local")
    tables = [memo.get(k) for k in ("signalled", "evicted", "refused")]
    if not (isinstance(policy, dict) and all(isinstance(policy.get(k), str)
                                             for k in ("signal", "signal_scope", "on_drain"))):
        return False
    if not (isinstance(local, dict) and all(isinstance(local.get(k), dict) for k in ("checkpoint", "term", "kill"))):
        return False
    if not all(isinstance(t, dict) for t in tables) or not all(_number(t) for t in memo["evicted"].values()):
        return False
    down = memo.get("down_since")
    return down is None or _number(down)
