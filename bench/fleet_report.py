"""What bench/fleet.py measures besides the drains themselves, and how it says it.

- ``CpuMeter``: CPU seconds, per scenario, of every process (and thread) of the run, so a result
  says where the two cores went before anyone optimises: the API server and etcd; the fake
  control plane (kubelets + disruption controller, a process of its own); in the bench's own
  process the observer's watch thread and, the rest of that process, the drainers (the agents'
  drain code, or the central drainer, or the noisy loop); the drainers' processes (reaped
  children: the agents' workers, bench/fleet_agents.py, or the ``kubectl`` processes); and the whole machine's busy time against its capacity (cores x wall time), whose
  remainder is everyone else's (other sessions on a shared box).
- ``headline``: the share on time for each scenario, and each peer's time to drain every node
  against the agents'. Every drainer runs until all nodes are empty or the cap; a drainer that
  did not finish has no time-to-drain-all, only a lower bound (the cap, or when it stopped), and
  a ratio built on one is marked as the bound it is -- never a made-up number.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import psutil

PEERS = ("central", "kubectl")


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


class CpuMeter:
    """``sample()`` now; ``since(before)`` the CPU seconds each part used in between."""

    def __init__(self, pids: dict[str, int], observer: threading.Thread) -> None:
        self._procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self._me = psutil.Process()
        self._observer = observer

    def sample(self) -> dict[str, float]:
        out = {name: _cpu(p) for name, p in self._procs.items()}
        mine = self._me.cpu_times()
        out["bench_process"] = mine.user + mine.system
        # Reaped children only: the agents' worker processes, or the kubectl processes.
        out["drainer_processes"] = mine.children_user + mine.children_system
        threads = {t.id: t.user_time + t.system_time for t in self._me.threads()}
        out["observer"] = threads.get(self._observer.native_id or -1, 0.0)
        machine = psutil.cpu_times()
        out["machine_busy"] = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
        out["wall"] = time.monotonic()
        return out

    def since(self, before: dict[str, float]) -> dict[str, Any]:
        now = self.sample()
        d = {k: now[k] - before[k] for k in now}
        wall = d.pop("wall")
        ours = {k: round(v, 1) for k, v in d.items() if k not in ("machine_busy", "bench_process")}
        ours["drainers_in_bench"] = round(d["bench_process"] - d["observer"], 1)
        capacity = (psutil.cpu_count() or 1) * wall
        counted = sum(v for k, v in d.items() if k not in ("machine_busy", "observer"))   # bench holds observer
        return {**ours, "machine_busy": round(d["machine_busy"], 1), "machine_capacity": round(capacity, 1),
                "machine_busy_share": round(d["machine_busy"] / capacity, 3) if capacity else None,
                "others_on_machine": round(max(0.0, d["machine_busy"] - counted), 1)}


ROLES = (("drain-", "coordinators"), ("evict", "eviction_workers"), ("pod-watch", "pod_watches"),
         ("pdb-watch", "pdb_watches"), ("pod-informer", "observer"))


class ThreadRoles:
    """CPU seconds of a process's threads by role (a drain's coordinator, its eviction workers,
    its watches...), sampled every ``interval_s`` so that threads which end are counted up to
    their last sample (``/proc/self/task``, through psutil). A sample of 3,000 threads costs
    ~76 ms of CPU (measured), so not more often than every 5 s: a thread's last seconds before it
    ends may go uncounted, which this breakdown (not the process totals) can afford."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self._interval = interval_s
        self._seen: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-roles", daemon=True)

    def start(self) -> ThreadRoles:
        self._thread.start()
        return self

    def _sample(self) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        for t in psutil.Process().threads():
            role = next((r for prefix, r in ROLES if names.get(t.id, "").startswith(prefix)), "other")
            self._seen[t.id] = (role, t.user_time + t.system_time)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(5)
        self._sample()
        out: dict[str, float] = {}
        for role, cpu in self._seen.values():
            out[role] = out.get(role, 0.0) + cpu
        return {k: round(v, 1) for k, v in sorted(out.items())}


def percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    v = ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return None if v == float("inf") else round(v, 2)


def line(row: dict[str, Any]) -> str:
    done = row["time_to_drain_all_s"]
    cpu = row.get("cpu_s", {})
    return (f"{row['scenario']:>9}: on time {row['share_on_time'] * 100:5.1f} %  p50 {row['p50_s']} s  "
            f"p99 {row['p99_s']} s  all {done if done is not None else '> ' + str(row['ran_s'])} s  "
            f"{row['evictions_per_s']} evictions/s  "
            f"{row.get('agent_requests_per_node', row['server_requests_per_node'])} req/node  "
            f"429s {row['http_429']}  CPU s: apiserver {cpu.get('kube-apiserver')} etcd {cpu.get('etcd')} "
            f"plane {cpu.get('control_plane')} drainers {cpu.get('drainers_in_bench')} "
            f"observer {cpu.get('observer')} drainer processes {cpu.get('drainer_processes')} "
            f"machine {cpu.get('machine_busy')}/{cpu.get('machine_capacity')} (others {cpu.get('others_on_machine')})")


def _ratio(agents: dict[str, Any], peer: dict[str, Any]) -> dict[str, Any]:
    """The peer's time to drain all over the agents' (> 1: the agents are faster), with which side
    is only a bound."""
    a, p = agents["time_to_drain_all_s"], peer["time_to_drain_all_s"]
    out: dict[str, Any] = {"agents_time_to_drain_all_s": a, "peer_time_to_drain_all_s": p,
                           "agents_finished": a is not None, "peer_finished": p is not None,
                           "peer_ran_s": peer["ran_s"]}
    if a is not None and p is not None:
        out.update(ratio=round(p / a, 2), ratio_is_lower_bound=False, ratio_is_upper_bound=False)
    elif a is not None:   # the peer did not finish: it needs more than it ran
        out.update(ratio=round(peer["ran_s"] / a, 2), ratio_is_lower_bound=True, ratio_is_upper_bound=False)
    elif p is not None:   # the agents did not finish: they need more than they ran
        out.update(ratio=round(p / agents["ran_s"], 2), ratio_is_lower_bound=False, ratio_is_upper_bound=True)
    else:
        out.update(ratio=None, ratio_is_lower_bound=False, ratio_is_upper_bound=False)
    rate = peer["evictions_per_s"]
    out["evictions_per_s_ratio"] = round(agents["evictions_per_s"] / rate, 2) if rate else None
    return out


def headline(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by = {r["scenario"]: r for r in rows}
    out: dict[str, Any] = {"share_on_time": {k: r["share_on_time"] for k, r in by.items()}}
    if "agents" in by:
        out["time_to_drain_all_peer_over_agents"] = {p: _ratio(by["agents"], by[p]) for p in PEERS if p in by}
    return out
