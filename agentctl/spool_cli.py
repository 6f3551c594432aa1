"""sco-agentctl spool: look into the spool file, safely, while the spool runs.

  sco-agentctl [--config X] spool stat                  head, tail, unshipped records, damage (JSON)
  sco-agentctl [--config X] spool tail [-n N] [-f]      the newest N events (default 10); -f: then follow
  sco-agentctl [--config X] spool dump [--from-head]    every event still in the file, oldest first;
                                                        --from-head: only those not yet shipped
  sco-agentctl [--config X] spool poison [--raw]        records Vector refused alone, again and again, and
                                                        the shipper set aside (spool.poison), oldest first;
                                                        --raw: only the records themselves

Events print one JSON object per line, exactly as stored and shipped, so the
output pipes into jq. The file is opened read-only (spool.reader) and never
locked or written: the running spool is not disturbed, and a record it is
writing at that moment is simply not shown until it verifies. How the file is
read is spool.reader's business; this module only prints.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, BinaryIO

import ujson

from common.config import ConfigError, load
from common.timefmt import format_rfc3339
from spool import poison
from spool.reader import follow, iter_records, read_stats
from spool.ring import SPOOL_FILE
from spool.scan import Record

FOLLOW_INTERVAL_S = 0.5


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sco-agentctl spool", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="agent configuration (default $SCO_AGENT_CONFIG)")
    p.add_argument("--file", help="the spool file (default: spool.dat in the config's state_dir)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("stat", help="where the head and tail are, how much is unshipped")
    tail = sub.add_parser("tail", help="the newest events")
    tail.add_argument("-n", type=int, default=10, metavar="N", help="how many (default 10)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new events")
    tail.add_argument("--interval", type=float, default=FOLLOW_INTERVAL_S, help=argparse.SUPPRESS)
    dump = sub.add_parser("dump", help="every event still in the file")
    dump.add_argument("--from-head", action="store_true", help="only the events not yet shipped")
    bad = sub.add_parser("poison", help="records set aside because Vector could not decode them")
    bad.add_argument("--raw", action="store_true", help="print only each record, as it was spooled")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        path = args.file or os.path.join(load(args.config).paths.state_dir, SPOOL_FILE)
    except (ConfigError, OSError) as e:
        print(f"sco-agentctl spool: {e}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    if args.command == "poison":
        # The poison file sits next to the spool file; none at all means nothing was ever set aside.
        write_poison(out, os.path.join(os.path.dirname(path), poison.POISON_FILE), args.raw)
        out.flush()
        return 0
    if not os.path.exists(path):
        print(f"sco-agentctl spool: no spool file at {path}", file=sys.stderr)
        return 1
    try:
        if args.command == "stat":
            out.write(ujson.dumps(stat(path), indent=2).encode() + b"\n")
        elif args.command == "dump":
            write(out, iter_records(path, from_head=args.from_head))
        else:
            tail(out, path, max(args.n, 0), args.follow, args.interval)
        out.flush()
    except BrokenPipeError:
        # `| head` closed the pipe: not an error. Point stdout at /dev/null so exit's flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:
        pass
    except OSError as e:
        print(f"sco-agentctl spool: {path}: {e}", file=sys.stderr)
        return 1
    return 0


def stat(path: str) -> dict[str, Any]:
    """read_stats, plus when the oldest unshipped event was spooled (how far shipping lags)."""
    stats = read_stats(path)
    oldest = next(iter_records(path, from_head=True), None)
    stats["oldest_unshipped_at"] = format_rfc3339(oldest.ts_ms / 1000) if oldest else None
    return stats


def write_poison(out: BinaryIO, path: str, raw: bool) -> None:
    out.writelines(str(item.get("record", "")).encode() + b"\n" if raw else poison.encode(item) for item in poison.read(path))


def write(out: BinaryIO, records: Iterable[Record]) -> None:
    out.writelines(rec.payload + b"\n" for rec in records)


def tail(out: BinaryIO, path: str, n: int, follow: bool, interval: float) -> None:
    newest: deque[Record] = deque(maxlen=n)
    last: Record | None = None
    for rec in iter_records(path, from_head=False):
        newest.append(rec)
        last = rec
    write(out, newest)
    out.flush()
    if not follow:
        return
    if last is not None:
        pos, seq = last.end, last.seq + 1
    else:
        stats = read_stats(path)
        pos, seq = stats["tail_offset"], stats["next_seq"]
    follow_from(out, path, pos, seq, interval)


def follow_from(out: BinaryIO, path: str, pos: int, seq: int, interval: float) -> None:
    """Print records as the spool appends them, from (pos, seq) on, until interrupted."""
    for new in follow(path, pos, seq):
        write(out, new)
        out.flush()
        time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main())
