"""Memory and CPU of a set of processes, read from /proc (Linux).

PSS (proportional set size) is the honest figure for processes that share
pages; summed RSS overstates a forked agent about 3x. Read from
/proc/PID/smaps_rollup, which the kernel computes in one pass.

PSS also divides a page with processes *outside* the agent: on a development
machine running twenty other Pythons, libpython's pages count a twentieth. So
the table also gives the agent's distinct resident pages (every physical page
any agent process maps, counted once, from /proc/PID/pagemap; needs root):
what the agent would cost on a node where nothing else shares its files. It
counts shared libraries such as libc whole, so it is an upper bound.
"""
from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
_PRESENT = 1 << 63
_PFN = (1 << 55) - 1


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


def resident(pid: int) -> Iterator[tuple[int, str]]:
    """(physical frame number, its /proc/PID/maps line) of every resident page of ``pid``.

    Nothing without the privilege to read pagemap (frame numbers read as 0).
    """
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
            for line in maps:
                parts = line.split()
                if parts[-1] == "[vsyscall]":
                    continue   # above the user address range: pagemap cannot be read there
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                pagemap.seek(lo // PAGE * 8)
                for (entry,) in struct.iter_unpack("<Q", pagemap.read((hi - lo) // PAGE * 8)):
                    if entry & _PRESENT and entry & _PFN:
                        yield entry & _PFN, line
    except OSError:
        return


def page_frames(pid: int) -> set[int]:
    """Physical frame numbers of every resident page of ``pid`` (empty without the privilege)."""
    return {frame for frame, _ in resident(pid)}


def _mapping_kind(line: str) -> str:
    """What a /proc/PID/maps line maps, as the composition table names it."""
    parts = line.split(maxsplit=5)
    name = parts[5].strip() if len(parts) > 5 else ""
    if not name or (name.startswith("[") and name not in ("[vdso]", "[vvar]")):
        return "heap (anonymous, [heap], [stack])"
    return os.path.basename(name)


def composition(pids: dict[str, int], top: int = 14) -> str:
    """Distinct resident pages of all ``pids`` by what maps them: each page counted once, under the
    first mapping seen (the Python heaps are anonymous; a library's pages are its file's)."""
    kinds: dict[int, str] = {}
    for pid in pids.values():
        for frame, line in resident(pid):
            if frame not in kinds:
                kinds[frame] = _mapping_kind(line)
    totals: dict[str, int] = {}
    for kind in kinds.values():
        totals[kind] = totals.get(kind, 0) + 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])
    rows = [f"  {kind:<40} {n * PAGE / 2**20:6.1f}" for kind, n in ranked[:top]]
    rest = sum(n for _, n in ranked[top:])
    rows.append(f"  {'(the rest)':<40} {rest * PAGE / 2**20:6.1f}")
    return "\n".join(rows)


def distinct_mib(pids: dict[str, int]) -> float:
    """Resident memory of all ``pids`` together, every shared page counted once; 0 if unreadable."""
    frames: set[int] = set()
    for pid in pids.values():
        frames |= page_frames(pid)
    return len(frames) * PAGE / 2**20


def threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])   # utime + stime


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches of every thread of ``pid``: its wake-ups."""
    n = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        n += int(line.split()[1])
        except OSError:
            pass   # a thread that ended meanwhile
    return n


def activity(pids: dict[str, int], seconds: float) -> dict[str, tuple[float, float]]:
    """(millicores, wake-ups per second) of each process over ``seconds`` of wall time.

    CPU time is counted in clock ticks (10 ms), too coarse to tell 0.2 from 0.5
    millicores in a short window; the wake-up rate shows polling at once.
    """
    before = {name: (cpu_ticks(pid), context_switches(pid)) for name, pid in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    out = {}
    for name, pid in pids.items():
        ticks, switches = cpu_ticks(pid), context_switches(pid)
        out[name] = (round((ticks - before[name][0]) / CLK_TCK / elapsed * 1000, 2),
                     round((switches - before[name][1]) / elapsed, 1))
    return out


def millicores(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """CPU use of each process over ``seconds`` of wall time, in millicores."""
    return {name: mc for name, (mc, _) in activity(pids, seconds).items()}


def table(pids: dict[str, int],
          cpu: dict[str, tuple[float, float]] | None = None) -> tuple[str, dict[str, float]]:
    """A printable table and the totals in MiB; ``cpu`` is what ``activity`` returned."""
    rows = ["process       PSS MiB   USS MiB   RSS MiB  threads   millicores  wake-ups/s"]
    total = {"pss": 0.0, "uss": 0.0, "rss": 0.0, "millicores": 0.0, "wakeups": 0.0}
    for name, pid in pids.items():
        m = memory_kib(pid)
        mc, wk = (cpu or {}).get(name, (0.0, 0.0))
        rows.append(f"{name:<12} {m['pss'] / 1024:8.1f}  {m['uss'] / 1024:8.1f}  {m['rss'] / 1024:8.1f}"
                    f"  {threads(pid):7d}   {mc:8.2f}  {wk:10.1f}")
        for k in ("pss", "uss", "rss"):
            total[k] += m[k] / 1024
        total["millicores"] += mc
        total["wakeups"] += wk
    rows.append(f"{'TOTAL':<12} {total['pss']:8.1f}  {total['uss']:8.1f}  {total['rss']:8.1f}"
                f"  {'':7}   {total['millicores']:8.2f}  {total['wakeups']:10.1f}")
    total["distinct"] = distinct_mib(pids)
    rows.append(f"distinct resident pages of the agent (each shared page once): {total['distinct']:.1f} MiB")
    return "\n".join(rows), {k: round(v, 2) for k, v in total.items()}
