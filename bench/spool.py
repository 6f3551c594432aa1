"""Benchmark of the spool: the file layer, and the real process end to end.

Run from the repository root with ``python -m bench.spool``. The files live in
a temporary directory next to the repository, so they are on the same disk
the agent's spool would be. The last line printed is one JSON object holding
the headline figures. Goals: >= 20,000 durable events/s with group commit,
recovery of a full 64 MB file <= 1 s.

File layer: SpoolRing alone (append + fdatasync per batch; read + release;
recovery of a full file in a fresh interpreter).

End to end: ``python -m spool`` as a child, fed over zmq by N sender
processes, each a real SpoolLink keeping a window of unacknowledged events
(`python -m bench.spool sender ...`): the figure is events acknowledged per
second -- acknowledged means appended and fdatasync'ed. Then the same process
ships a pre-filled file to the Vector emulator (a subprocess), events/s from
the first delivered batch to the last; and restarts on a full 64 MB file,
seconds from exec to the first acknowledgement.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spool.ring import DEFAULT_SIZE, SpoolRing

REPO = Path(__file__).resolve().parents[1]
BATCHES = (1, 10, 100)
SECONDS_PER_RUN = 1.5
SENDER_COUNTS = (1, 2, 4)
# Unacknowledged events kept in flight, shared by the senders: enough to keep the spool's
# rounds full, little enough that acks come well within the 2 s after which SpoolLink
# resends (queueing beyond that makes resends, which past the spool's recent-id memory are
# written again: more work, later acks, more resends).
IN_FLIGHT = 8000
SENDER_WINDOW_MAX = 4000
E2E_SECONDS = 3.0
SHIP_EVENTS = 50_000

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


def file_layer(d: str, sample: list[bytes], headline: dict[str, float]) -> None:
    """The ring alone: group commit, read + release, recovery of a full 64 MB file."""
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


# -- end to end: the spool process over zmq, shipping to the Vector emulator -------------

def write_config(base: str, **spool: Any) -> str:
    from tests.support.agent_rig import write_config as write

    path = os.path.join(base, "agent.toml")
    write(path, {"node": {"name": "bench-node", "hall": "bench"},
                 "paths": {"runtime_dir": os.path.join(base, "run"), "state_dir": os.path.join(base, "state")},
                 "spool": spool})
    return path


@contextmanager
def spool_process(config: str) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen([sys.executable, "-m", "spool", "--config", config], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sender_main(config: str, start_at: float, seconds: float, window: int) -> None:
    """One sender process: a SpoolLink keeping ``window`` events in flight; prints acks in [start_at, +seconds)."""
    import io

    import zmq

    from common.config import load
    from common.log import Logger
    from common.runtime import SpoolLink

    link = SpoolLink(zmq.Context(), load(config), "bench", Logger("bench", stream=io.StringIO()))
    poller = zmq.Poller()
    poller.register(link.sock, zmq.POLLIN)
    box = link.outbox
    n = 0
    acked_at_start = None
    next_tick = 0.0
    while (now := time.time()) < start_at + seconds:
        if acked_at_start is None and now >= start_at:
            acked_at_start = n - len(box.pending)
        while len(box.pending) < window:
            link.emit("drain.evicted", data={"pod": f"default/trainer-{n % 97}", "grace_s": 30, "attempt": 1})
            n += 1
        if poller.poll(5):
            link.on_readable()
        if now >= next_tick:   # as every agent process does: resend what was not acknowledged within 2 s
            link.tick()
            next_tick = now + 0.5
    acked = n - len(box.pending) - (acked_at_start or 0)
    print(json.dumps({"acked": acked, "seconds": seconds}))


def durable_rate_e2e(directory: str, senders: int) -> dict[str, float]:
    """Acknowledged (= fdatasync'ed) events/s through the spool process from ``senders`` processes,
    the spool's own CPU per event over the same window, and its PSS at the end."""
    from bench.procstats import CLK_TCK, cpu_ticks, memory_kib

    base = tempfile.mkdtemp(dir=directory, prefix=f"e2e-{senders}-")
    config = write_config(base)
    with spool_process(config) as spool:
        start_at = time.time() + 1.5   # every sender connected and warmed up by then
        window = min(SENDER_WINDOW_MAX, IN_FLIGHT // senders)
        procs = [subprocess.Popen([sys.executable, "-m", "bench.spool", "sender", config, str(start_at),
                                   str(E2E_SECONDS), str(window)], cwd=REPO, stdout=subprocess.PIPE,
                                  text=True) for _ in range(senders)]
        time.sleep(max(0.0, start_at - time.time()))
        pids = [spool.pid] + [p.pid for p in procs]
        before = [cpu_ticks(pid) for pid in pids]
        time.sleep(E2E_SECONDS)
        used = [cpu_ticks(pid) - b for pid, b in zip(pids, before, strict=True)]
        outs = [p.communicate(timeout=60)[0] for p in procs]
        pss = memory_kib(spool.pid)["pss"]
    acked = max(1, sum(json.loads(out.strip().splitlines()[-1])["acked"] for out in outs))
    return {"rate": acked / E2E_SECONDS, "pss_kib": pss,
            "cpu_us_per_event": used[0] / CLK_TCK / acked * 1e6,
            "sender_cpu_us_per_event": sum(used[1:]) / CLK_TCK / acked * 1e6}


def ship_rate_e2e(directory: str, sample: list[bytes]) -> float:
    """Events/s from a pre-filled spool file to the Vector emulator, first delivered batch to last."""
    from tests.emulators.vector_fixture import vector_process

    base = tempfile.mkdtemp(dir=directory, prefix="ship-")
    os.makedirs(os.path.join(base, "state"), mode=0o700)
    with SpoolRing.open(os.path.join(base, "state", "spool.dat")) as ring:
        for i in range(0, SHIP_EVENTS, 1000):
            ring.append([_with_id(p, i + j) for j, p in enumerate(sample[:1000])])
        ring.sync()
    with vector_process(Path(base) / "vector", path="/events") as vec:
        config = write_config(base, vector_url=vec.url)
        with spool_process(config):
            first = last = None
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                count = vec.stats()["records"]
                now = time.perf_counter()
                if count and first is None:
                    first = (now, count)
                if count >= SHIP_EVENTS:
                    last = (now, count)
                    break
                time.sleep(0.05)
    if first is None or last is None:
        raise RuntimeError("shipping did not finish")
    return (last[1] - first[1]) / (last[0] - first[0])


def first_ack_after_restart(directory: str, sample: list[bytes]) -> float:
    """Seconds from exec of the spool process on a full 64 MB file to its first acknowledgement."""
    import io

    import zmq

    from common.config import load
    from common.log import Logger
    from common.runtime import SpoolLink

    base = tempfile.mkdtemp(dir=directory, prefix="restart-")
    config = write_config(base)
    os.makedirs(os.path.join(base, "state"), mode=0o700)
    fill(os.path.join(base, "state", "spool.dat"), sample)
    ctx = zmq.Context()
    try:
        link = SpoolLink(ctx, load(config), "bench", Logger("bench", stream=io.StringIO()))
        link.emit("agent.started")
        t = time.perf_counter()
        with spool_process(config):
            while link.outbox.pending:
                if link.sock.poll(10):
                    link.on_readable()
                link.tick()
            return time.perf_counter() - t
    finally:
        ctx.destroy(linger=0)


def _with_id(payload: bytes, i: int) -> bytes:
    ev = json.loads(payload)
    ev["event_id"] = f"ship-{i}"
    return json.dumps(ev, separators=(",", ":")).encode()


def main() -> None:
    sample = events(2000)
    avg = sum(map(len, sample)) / len(sample)
    print(f"event size: {avg:.0f} bytes; ring size {DEFAULT_SIZE // 2**20} MiB")
    headline: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=REPO, prefix=".bench-spool-") as d:
        file_layer(d, sample, headline)
        print("-- end to end: python -m spool, senders over zmq (SpoolLink), acked = fdatasync'ed")
        for n in SENDER_COUNTS:
            r = durable_rate_e2e(d, n)
            headline[f"e2e_durable_events_per_s_{n}_senders"] = round(r["rate"])
            headline[f"e2e_spool_cpu_us_per_event_{n}_senders"] = round(r["cpu_us_per_event"], 1)
            headline["e2e_spool_pss_kib"] = max(headline.get("e2e_spool_pss_kib", 0), r["pss_kib"])
            headline[f"e2e_sender_cpu_us_per_event_{n}_senders"] = round(r["sender_cpu_us_per_event"], 1)
            print(f"{n} sender(s), {min(SENDER_WINDOW_MAX, IN_FLIGHT // n)} in flight each:"
                  f" {r['rate']:>10,.0f} acknowledged events/s;"
                  f" CPU per event: spool {r['cpu_us_per_event']:.1f} us ({1e6 / r['cpu_us_per_event']:,.0f}"
                  f" events/s per core), senders {r['sender_cpu_us_per_event']:.1f} us;"
                  f" spool PSS {r['pss_kib'] / 1024:.1f} MiB")
        rates = [headline[f"e2e_durable_events_per_s_{n}_senders"] for n in SENDER_COUNTS]
        cpu = [headline[f"e2e_spool_cpu_us_per_event_{n}_senders"] for n in SENDER_COUNTS]
        headline["e2e_durable_events_per_s"] = max(rates)
        headline["e2e_spool_events_per_s_per_core"] = round(1e6 / min(cpu))
        shipped = ship_rate_e2e(d, sample)
        headline["e2e_ship_events_per_s_vector_emulator"] = round(shipped)
        print(f"shipping {SHIP_EVENTS:,} spooled events to the Vector emulator: {shipped:>10,.0f} events/s")
        took = first_ack_after_restart(d, sample)
        headline["e2e_first_ack_s_after_restart_full_64mb"] = round(took, 3)
        print(f"spool restarted on a full 64 MB file: first acknowledgement after {took:.3f} s"
              " (interpreter start + recovery)")
    print(json.dumps(headline))


def cli(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.spool")
    sub = parser.add_subparsers(dest="command")
    snd = sub.add_parser("sender", help="internal: one sender process of the end-to-end run")
    snd.add_argument("config")
    snd.add_argument("start_at", type=float)
    snd.add_argument("seconds", type=float)
    snd.add_argument("window", type=int)
    args = parser.parse_args(argv)
    if args.command == "sender":
        sender_main(args.config, args.start_at, args.seconds, args.window)
    else:
        main()


if __name__ == "__main__":
    cli()
