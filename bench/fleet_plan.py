"""What bench/fleet.py runs and what it concludes (pure: plain data, no I/O, no clock).

- ``nodes_for`` / ``overload``: a scenario is sized by its overload factor, the demand (nodes x
  pods per node, all due within the deadline) over the server's capacity (the ideal drainer's
  evictions/s, measured first in the same run): ``factor = nodes * pods / deadline / capacity``.
- ``plan``: the scenarios of a run -- the agents at every (deadline, factor), the peers next to
  the agents' smallest scenario (the same nodes count and deadline, so their times compare).
- ``headline``: the figures the issue asks for, one key each, from the scenarios' rows; each
  goodput also against both capacity probes (before the scenarios and after them: the server's
  capacity moves over a run, and a ratio over one probe hides it); and,
  because a shared machine's other load changes what the server gets of its core from one
  scenario to the next, the agents' server CPU per pod over the ideal drainer's, which it does not.
- ``exit_status``: non-zero only when the run could not do what it was asked (a scenario did
  not run to its end, a count is missing); a missed goal is a figure, not a failure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PODS_PER_NODE = 30
PEERS = ("central", "central50", "kubectl")
PROBE, PROBE_END = "ideal probe", "ideal probe (end)"   # the ideal drainer before the scenarios and after


@dataclass(frozen=True)
class Scenario:
    label: str          # unique in a run: "agents 30s x2", "central 30s x1", "ideal probe"
    drainer: str        # agents | ideal | central | central50 | kubectl
    nodes: int
    deadline_s: float
    factor: float       # asked for (the achieved one is in the row: nodes are whole, and capped)
    cap_s: float        # the drainer runs until every node is empty or this long


def overload(nodes: int, deadline_s: float, capacity_eps: float, pods: int = PODS_PER_NODE) -> float:
    """Demand over capacity: the evictions/s the deadline asks for, over what the server can do."""
    return nodes * pods / deadline_s / capacity_eps


def nodes_for(factor: float, deadline_s: float, capacity_eps: float, pods: int = PODS_PER_NODE,
              max_nodes: int | None = None) -> int:
    """The fewest whole nodes whose demand is at least ``factor`` x capacity (at least 1; at most
    ``max_nodes``, where the achieved factor is then lower: the row says which)."""
    if capacity_eps <= 0 or deadline_s <= 0 or factor <= 0:
        raise ValueError(f"capacity {capacity_eps}, deadline {deadline_s}, factor {factor}: all must be > 0")
    n = max(1, math.ceil(factor * capacity_eps * deadline_s / pods - 1e-9))
    return n if max_nodes is None else min(n, max_nodes)


def label(drainer: str, deadline_s: float, factor: float) -> str:
    return f"{drainer} {deadline_s:g}s x{factor:g}"


def plan(capacity_eps: float, deadlines: list[float], factors: list[float], peers: list[str],
         max_nodes: int | None = None, peer_cap_factor: float = 3.0) -> list[Scenario]:
    """The agents at every deadline x factor (the agents give up 30 s past the deadline by
    themselves: runner.LINGER_S; the cap is a backstop), then every peer at the smallest factor
    of the shortest deadline, on as many nodes as the agents had there."""
    out = []
    for d in deadlines:
        for f in factors:
            out.append(Scenario(label("agents", d, f), "agents", nodes_for(f, d, capacity_eps, max_nodes=max_nodes),
                                d, f, d + 60.0))
    if peers and deadlines and factors:
        d, f = min(deadlines), min(factors)
        n = nodes_for(f, d, capacity_eps, max_nodes=max_nodes)
        for p in peers:
            if p not in PEERS:
                raise ValueError(f"unknown peer {p!r} (known: {', '.join(PEERS)})")
            out.append(Scenario(label(p, d, f), p, n, d, f, peer_cap_factor * d))
    return out


def probe(nodes: int, end: bool = False) -> Scenario:
    """The ideal drainer on ``nodes`` nodes: the capacity probe before the scenarios, or after them."""
    return Scenario(PROBE_END if end else PROBE, "ideal", nodes, 30.0, 0.0, 600.0)


def after_probe(scenarios: list[Scenario], probe_nodes: int, probed: bool) -> list[Scenario]:
    """What runs once the capacity is known: the planned scenarios, then -- when the run probed
    the capacity itself rather than being given it -- the same probe again, to see how far the
    server's capacity moved while the scenarios ran."""
    return [s for s in scenarios if s.drainer != "ideal"] + ([probe(probe_nodes, end=True)] if probed else [])


def goodput(row: dict[str, Any]) -> float | None:
    """Evictions/s while it mattered: the pods out by the deadline over the deadline, or over the
    time to drain all when that came first."""
    done = row.get("time_to_drain_all_s")
    window = row["deadline_s"] if done is None else min(done, row["deadline_s"])
    if not window:
        return None
    out = row["pods_out_by_deadline"] if done is None or done > row["deadline_s"] else row["pods"]
    return out / window


def pods_per_server_cpu_s(row: dict[str, Any]) -> float | None:
    """Pods out per CPU second of the API server and etcd: what a drainer costs the server, which
    other load on its core does not change (the throughput figures it does)."""
    cpu = row.get("cpu_s") or {}
    used = (cpu.get("kube-apiserver") or 0.0) + (cpu.get("etcd") or 0.0)
    return row["pods_out"] / used if used > 0 and row.get("pods_out") else None


def _ratio(agents: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """The peer's time to drain all over the agents' (> 1: the agents are faster); a side that did
    not finish gives only a bound (its ran_s), and the ratio says which."""
    a, p = agents["time_to_drain_all_s"], peer["time_to_drain_all_s"]
    out: dict[str, Any] = {"agents_s": a, "peer_s": p, "peer_ran_s": peer["ran_s"], "agents_ran_s": agents["ran_s"]}
    if a is not None and p is not None:
        out.update(ratio=round(p / a, 2), bound=None)
    elif a is not None:
        out.update(ratio=round(peer["ran_s"] / a, 2), bound="lower")
    elif p is not None:
        out.update(ratio=round(p / agents["ran_s"], 2), bound="upper")
    else:
        out.update(ratio=None, bound=None)
    return out


def headline(rows: list[dict[str, Any]], capacity_eps: float | None) -> dict[str, Any]:
    """The issue's headline keys from the rows that completed (a failed row is only in ``failed``)."""
    ok = [r for r in rows if not r.get("error")]
    agents = [r for r in ok if r["drainer"] == "agents"]
    out: dict[str, Any] = {
        "capacity_evictions_per_s": capacity_eps,
        "goodput_over_capacity": {},
        "pods_out_by_deadline_share": {r["label"]: r["pods_out_by_deadline_share"] for r in ok
                                       if r["drainer"] != "ideal"},
        "share_on_time": {r["label"]: r["share_on_time"] for r in ok if r["drainer"] != "ideal"},
        "p99_s": {r["label"]: r["p99_s"] for r in ok if r["drainer"] != "ideal"},
        "lease_renew_p99_ms": {r["label"]: r["lease"]["p99_ms"] for r in ok if r.get("lease")},
        "lease_renew_failures": {r["label"]: r["lease"]["failures"] for r in ok if r.get("lease")},
        "agent_cpu_s_per_pod": {r["label"]: r["agent_cpu_s_per_pod"] for r in agents},
        "requests_per_pod": {r["label"]: r["requests_per_pod"] for r in ok if r.get("requests_per_pod") is not None},
        "refusals": {r["label"]: r["refusals"] for r in ok if r.get("refusals") is not None},
        "notice_to_cordon_p99_ms": {r["label"]: r["notice_to_cordon_p99_ms"] for r in agents},
        "time_to_drain_all_peer_over_agents": {},
        "failed": [r["label"] for r in rows if r.get("error")],
    }
    probes = {r["label"]: r["evictions_per_s"] for r in ok
              if r["drainer"] == "ideal" and r.get("completed") and r.get("evictions_per_s")}
    out["capacity_probes_evictions_per_s"] = probes
    out["goodput_over_capacity_range"] = {}
    if len(probes) > 1:   # each goodput against the best and the worst the server did in this run
        best, worst = max(probes.values()), min(probes.values())
        for r in agents:
            g = goodput(r)
            if g is not None:
                out["goodput_over_capacity_range"][r["label"]] = [round(g / best, 3), round(g / worst, 3)]
    ideal = next((r for r in ok if r["label"] == PROBE), None)
    ideal_eff = pods_per_server_cpu_s(ideal) if ideal is not None else None
    out["server_cpu_per_pod_over_ideal"] = {}
    for r in agents:
        eff = pods_per_server_cpu_s(r)
        out["server_cpu_per_pod_over_ideal"][r["label"]] = round(ideal_eff / eff, 2) if eff and ideal_eff else None
    if capacity_eps:
        for r in agents:
            g = goodput(r)
            out["goodput_over_capacity"][r["label"]] = None if g is None else round(g / capacity_eps, 3)
    for p in (r for r in ok if r["drainer"] in PEERS):
        same = [a for a in agents if a["nodes"] == p["nodes"] and a["deadline_s"] == p["deadline_s"]]
        if same:
            out["time_to_drain_all_peer_over_agents"][p["drainer"]] = _ratio(same[0], p)
    return out


def exit_status(asked: list[Scenario], rows: list[dict[str, Any]], capacity_eps: float | None) -> int:
    """0 when every scenario asked ran to its end with its counts; 1 otherwise (a goal missed is
    not a failure: the figures say it)."""
    if not capacity_eps or capacity_eps <= 0:
        return 1
    done = {r["label"] for r in rows if not r.get("error") and r.get("completed")}
    return 0 if all(s.label in done for s in asked) else 1
