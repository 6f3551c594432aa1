"""What bench/fleet.py measures besides the drains themselves, and how it says it.

- ``CpuMeter``: CPU seconds, per scenario, of every process (and thread) of the run, so a result
  says where the two cores went before anyone optimises: the API server and etcd; the fake
  control plane (kubelets + disruption controller, a process of its own); in the bench's own
  process the observer's watch thread and, the rest of that process, the drainers (the agents'
  drain code, or the central drainer, or the noisy loop); the drainers' processes (reaped
  children: the agents' workers, bench/fleet_agents.py, or the ``kubectl`` processes); and the whole machine's busy time against its capacity (cores x wall time), whose
  remainder is everyone else's (other sessions on a shared box).
- ``line``: a scenario's row in one line (the headline is bench/fleet_plan.py's).
"""
from __future__ import annotations

import threading
import time
from typing import Any

import psutil


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
    cpu, load, lease = row.get("cpu_s", {}), row.get("load", {}), row.get("lease") or {}
    plane = row.get("control_plane") or {}
    window = row.get("deadline_window_busy") or {}
    cordon = f"  notice->cordon p99 {row['notice_to_cordon_p99_ms']} ms" if "notice_to_cordon_p99_ms" in row else ""
    return (f"{row['label']:>18}: {row['nodes']} nodes (x{row['factor']})  on time {row['share_on_time'] * 100:5.1f} %  "
            f"out by deadline {row['pods_out_by_deadline_share'] * 100:5.1f} %  p99 {row['p99_s']} s  "
            f"all {done if done is not None else '> ' + str(row['ran_s'])} s  {row['evictions_per_s']} evictions/s  "
            f"{row.get('requests_per_pod')} req/pod  refusals {row.get('refusals')}  "
            f"agent CPU s/pod {row.get('agent_cpu_s_per_pod')}{cordon}  "
            f"lease p99 {lease.get('p99_ms')} ms failures {lease.get('failures')} max gap {lease.get('max_gap_s')} s  "
            f"control plane turns: kubelet {plane.get('kubelet_s')} s, PDB status {plane.get('controller_s')} s  "
            f"busy in the deadline's window: server core {window.get('server_cores_busy')}, "
            f"other core {window.get('other_cores_busy')}  "
            f"CPU s: apiserver {cpu.get('kube-apiserver')} etcd {cpu.get('etcd')} plane {cpu.get('control_plane')} "
            f"drainer processes {cpu.get('drainer_processes')} in bench {cpu.get('drainers_in_bench')}  "
            f"load: 1m {load.get('loadavg_1m_start')}->{load.get('loadavg_1m_end')}, server core "
            f"{load.get('server_core_busy_s')}/{load.get('wall_s')} s busy, others on it {load.get('server_core_others_s')} s, "
            f"machine others {cpu.get('others_on_machine')} s")
