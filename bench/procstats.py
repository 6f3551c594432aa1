"""Memory and CPU of a set of processes, read from /proc (Linux).

PSS (proportional set size) is the honest figure for processes that share
pages; summed RSS overstates a forked agent about 3x. Read from
/proc/PID/smaps_rollup, which the kernel computes in one pass.
"""
from __future__ import annotations

import os
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> dict[str, int]:
    """{'pss':..,'uss':..,'rss':..} in KiB; USS = private clean + private dirty."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                fields[parts[0][:-1]] = int(parts[1])
    return {
        "pss": fields.get("Pss", 0),
        "uss": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0),
        "rss": fields.get("Rss", 0),
    }


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])   # utime + stime


def millicores(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """CPU use of each process over ``seconds`` of wall time, in millicores."""
    before = {name: cpu_ticks(pid) for name, pid in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    after = {name: cpu_ticks(pid) for name, pid in pids.items()}
    return {name: round((after[name] - before[name]) / CLK_TCK / elapsed * 1000, 2) for name in pids}


def table(pids: dict[str, int], cpu: dict[str, float] | None = None) -> tuple[str, dict[str, float]]:
    """A printable table and the totals in MiB."""
    rows = ["process       PSS MiB   USS MiB   RSS MiB   millicores"]
    total = {"pss": 0.0, "uss": 0.0, "rss": 0.0, "millicores": 0.0}
    for name, pid in pids.items():
        m = memory_kib(pid)
        mc = (cpu or {}).get(name, 0.0)
        rows.append(f"{name:<12} {m['pss'] / 1024:8.1f}  {m['uss'] / 1024:8.1f}  {m['rss'] / 1024:8.1f}   {mc:8.2f}")
        for k in ("pss", "uss", "rss"):
            total[k] += m[k] / 1024
        total["millicores"] += mc
    rows.append(f"{'TOTAL':<12} {total['pss']:8.1f}  {total['uss']:8.1f}  {total['rss']:8.1f}   {total['millicores']:8.2f}")
    return "\n".join(rows), {k: round(v, 2) for k, v in total.items()}
