"""sco-agentctl simulate: inject a notice into the running agent, for game days.

  sco-agentctl simulate --kind reclaim --in 120s
  sco-agentctl simulate --kind cancel --id sim-...      (withdraw it again)

The notice is a relay payload (DESIGN section 3) written atomically into
``runtime_dir/inject/``; the watcher picks it up within a quarter second,
validates it like any relay payload and announces it on the "local" channel.
From there the drain is real -- unless the executor runs with
``executor.dry_run = true``, which logs every action and takes none.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
import uuid

import ujson

from common.config import ConfigError, load
from common.fsutil import write_atomic
from common.notice import KINDS
from common.timefmt import format_rfc3339
from watcher.inject import SUFFIX, inject_dir

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def parse_duration(text: str) -> float:
    """'120s', '2m', '90' (seconds), '500ms' -> seconds; ValueError otherwise."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r} (use e.g. 120s, 2m)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def build_payload(kind: str, node: str, notice_id: str, now: float, in_s: float,
                  instance_id: str = "") -> dict[str, object]:
    return {"v": 1, "id": notice_id, "kind": kind, "node": node, "instance_id": instance_id,
            "issued_at": format_rfc3339(now), "deadline": format_rfc3339(now + in_s),
            "source": "simulate"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sco-agentctl simulate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="agent configuration (default $SCO_AGENT_CONFIG)")
    parser.add_argument("--kind", choices=KINDS, default="reclaim")
    parser.add_argument("--in", dest="in_", default="120s", help="time to the deadline, e.g. 120s, 2m")
    parser.add_argument("--id", help="notice id (default: sim-<random>); required for --kind cancel")
    parser.add_argument("--node", help="target node (default: this node)")
    args = parser.parse_args(argv)
    try:
        config = load(args.config)
        in_s = parse_duration(args.in_)
    except (ConfigError, ValueError) as e:
        print(f"sco-agentctl simulate: {e}", file=sys.stderr)
        return 2
    if args.kind == "cancel" and not args.id:
        print("sco-agentctl simulate: --kind cancel needs the --id of the notice to withdraw", file=sys.stderr)
        return 2
    notice_id = args.id or f"sim-{uuid.uuid4().hex[:12]}"
    if not _ID.match(notice_id):
        print(f"sco-agentctl simulate: --id must match {_ID.pattern}", file=sys.stderr)
        return 2
    runtime_dir = config.paths.runtime_dir
    if not os.path.isdir(runtime_dir):
        print(f"sco-agentctl simulate: {runtime_dir} does not exist; is the agent running?", file=sys.stderr)
        return 1
    directory = inject_dir(runtime_dir)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    payload = build_payload(args.kind, args.node or config.node.name, notice_id, time.time(), in_s,
                            config.node.instance_id)
    path = os.path.join(directory, f"{time.time_ns()}-{notice_id}{SUFFIX}")
    write_atomic(path, ujson.dumps(payload).encode())
    print(ujson.dumps({"injected": path, "notice": payload}, indent=2, escape_forward_slashes=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
