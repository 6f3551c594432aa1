"""Benchmark of the spool's file layer: durable appends with group commit, and recovery of a full file.

Run from the repository root with ``python -m bench.spool``. The files live in
a temporary directory next to the repository, so they are on the same disk
the agent's spool would be. The last line printed is one JSON object holding
the headline figures. Goals: >= 20,000 durable events/s with group commit,
recovery of a full 64 MB file <= 1 s.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from spool.ring import DEFAULT_SIZE, SpoolRing

REPO = Path(__file__).resolve().parents[1]
BATCHES = (1, 10, 100)
SECONDS_PER_RUN = 1.5

# Recovery is timed in a fresh interpreter so its peak RSS shows what recovery itself costs.
_RECOVER = r"""
import json, sys, time
from spool.ring import SpoolRing

def kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")   # reset the peak-RSS mark, so it measures recovery alone
before = kib("VmRSS:")
t = time.perf_counter()
ring = SpoolRing.open(sys.argv[1])
took = time.perf_counter() - t
peak = kib("VmHWM:") - before
st = ring.stats()
ring.close()
print(json.dumps({"s": took, "peak_rss_growth_kib": peak, "records": st["recovered_records"],
                  "cut": st["recovery_tail_cut"]}))
"""


def events(n: int) -> list[bytes]:
    """Realistic ~300-byte events (DESIGN section 7 shape)."""
    out = []
    for i in range(n):
        out.append(json.dumps({
            "event_id": str(uuid.uuid4()), "seq": i, "ts": "2026-11-29T21:24:00.123Z",
            "node": "ip-10-1-2-3.eu-west-1.compute.internal", "hall": "hall-a", "source": "executor",
            "type": "drain.evicted", "notice_id": "aws-spot-i-0abc123def4567890-1764451440",
            "data": {"pod": f"default/trainer-{i % 97}", "grace_s": 30, "attempt": 1},
        }, separators=(",", ":")).encode())
    return out


def durable_rate(directory: str, batch: int, sample: list[bytes]) -> float:
    """Events/s when every batch is appended and then made durable by one fdatasync."""
    path = os.path.join(directory, f"rate-{batch}.ring")
    with SpoolRing.open(path) as ring:
        n = 0
        start = time.perf_counter()
        deadline = start + SECONDS_PER_RUN
        while time.perf_counter() < deadline:
            i = n % (len(sample) - batch)
            ring.append(sample[i:i + batch])
            ring.sync()
            n += batch
        took = time.perf_counter() - start
    os.unlink(path)
    return n / took


def fill(path: str, sample: list[bytes]) -> int:
    """Append until the ring first drops: a full file of unshipped events."""
    with SpoolRing.open(path) as ring:
        while True:
            if ring.append(sample[:1000]).dropped:
                break
        ring.sync()
        return ring.stats()["unshipped_records"]


def recover_once(path: str, cold: bool) -> dict:
    if cold:
        # Evict just this file from the page cache, so the read comes from the disk.
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    out = subprocess.run([sys.executable, "-c", _RECOVER, path], cwd=REPO, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def ship_rate(directory: str, sample: list[bytes], batch: int = 1000) -> float:
    """Events/s through read_unshipped + release (one header write and fdatasync per batch)."""
    path = os.path.join(directory, "ship.ring")
    with SpoolRing.open(path) as ring:
        for _i in range(0, 100_000, 1000):
            ring.append(sample[:1000])
        n = 0
        start = time.perf_counter()
        while got := ring.read_unshipped(batch, 1 << 30):
            ring.release(got[-1][0])
            n += len(got)
        took = time.perf_counter() - start
    os.unlink(path)
    return n / took


def tear_tail(path: str, keep: int, sample: list[bytes]) -> None:
    """Worst case for recovery: a few live records, a torn tail, then a whole file of stale records."""
    with SpoolRing.open(path) as ring:
        ring.release(ring.stats()["next_seq"] - 1)
        ring.append(sample[:keep])
        tail = ring.stats()["tail_offset"]
    with open(path, "r+b") as f:
        f.seek(tail)
        f.write(os.urandom(64))


def main() -> None:
    sample = events(2000)
    avg = sum(map(len, sample)) / len(sample)
    print(f"event size: {avg:.0f} bytes; ring size {DEFAULT_SIZE // 2**20} MiB")
    headline: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=REPO, prefix=".bench-spool-") as d:
        for batch in BATCHES:
            rate = durable_rate(d, batch, sample)
            headline[f"durable_events_per_s_batch{batch}"] = round(rate)
            print(f"durable append, batch {batch:>3} + fdatasync: {rate:>10,.0f} events/s")
        shipped = ship_rate(d, sample)
        headline["ship_events_per_s_batch1000"] = round(shipped)
        print(f"read_unshipped(1000) + release:   {shipped:>10,.0f} events/s")
        path = os.path.join(d, "full.ring")
        records = fill(path, sample)
        print(f"full 64 MB file: {records:,} unshipped records")
        warm = recover_once(path, cold=False)
        cold = recover_once(path, cold=True)
        print(f"recovery, page cache warm: {warm['s']:.3f} s ({warm['records']:,} records,"
              f" peak RSS +{warm['peak_rss_growth_kib']} KiB)")
        print(f"recovery, file evicted from page cache: {cold['s']:.3f} s"
              f" (peak RSS +{cold['peak_rss_growth_kib']} KiB)")
        tear_tail(path, 10, sample)
        torn = recover_once(path, cold=True)
        print(f"recovery, torn tail + 64 MB of stale records to scan: {torn['s']:.3f} s"
              f" (cut={torn['cut']}, peak RSS +{torn['peak_rss_growth_kib']} KiB)")
        headline.update(recovery_s_64mb=round(cold["s"], 3), recovery_s_64mb_warm=round(warm["s"], 3),
                        recovery_s_64mb_torn_tail=round(torn["s"], 3),
                        recovery_peak_rss_growth_kib=max(warm["peak_rss_growth_kib"],
                                                         cold["peak_rss_growth_kib"],
                                                         torn["peak_rss_growth_kib"]))
    print(json.dumps(headline))


if __name__ == "__main__":
    main()
