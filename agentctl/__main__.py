"""sco-agentctl: the operator's command for a running agent.

status and supervisor are here (status's summary in agentctl.status); contract,
spool and simulate are modules of their own, imported only when used so
`sco-agentctl status` stays quick. This package sits above the four process
packages: it reads what they write (state files, the spool file, contract
bundles) with their own readers, and none of them imports it.

  sco-agentctl status [--json]             processes, contract, active notice and its timeline, last verdict
  sco-agentctl simulate --kind reclaim --in 120s   inject a local notice (game days)
  sco-agentctl supervisor ARGS...          supervisorctl with the agent's environment
  sco-agentctl contract keygen|sign|verify|show ...
  sco-agentctl spool stat|tail|dump ...
"""
from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
from typing import Any

import ujson

from common.config import ConfigError, load

DELEGATES = {
    "contract": "agentctl.contract_cli",
    "spool": "agentctl.spool_cli",
    "simulate": "agentctl.simulate",
}


def _read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return ujson.loads(f.read(4 << 20))
    except (OSError, ValueError):
        return None


def _supervisor_env(config_path: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if config_path:
        env["SCO_AGENT_CONFIG"] = config_path
    env.setdefault("SCO_AGENT_CONFIG", "/etc/sco-agent/agent.toml")
    env.setdefault("SCO_AGENT_RUN_DIR", "/run/sco-agent/supervisor")
    env.setdefault("SCO_AGENT_LOG_DIR", "/var/log/sco-agent")
    return env


def _supervisord_conf() -> str:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for candidate in (os.path.join(here, "supervisord.conf"),
                      os.path.join(sys.prefix, "share", "sco-agent", "supervisord.conf")):
        if os.path.exists(candidate):
            return candidate
    return "supervisord.conf"


def cmd_supervisor(args: argparse.Namespace, rest: list[str]) -> int:
    supervisorctl = os.path.join(os.path.dirname(sys.executable), "supervisorctl")
    return subprocess.call([supervisorctl, "-c", _supervisord_conf(), *rest],
                           env=_supervisor_env(args.config))


def _spool_status(config: Any) -> dict[str, Any] | None:
    """Spool fill and backlog, read from the spool file without disturbing the spool."""
    from spool.reader import read_stats
    from spool.ring import SPOOL_FILE

    try:
        stats = read_stats(os.path.join(config.paths.state_dir, SPOOL_FILE))
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {"error": str(e)[:200]}
    size = stats.get("size") or 0
    return {"fill_pct": round(100.0 * stats.get("used_bytes", 0) / size, 1) if size else None,
            "unshipped_records": stats.get("unshipped_records")}


def cmd_status(args: argparse.Namespace, rest: list[str]) -> int:
    opts = argparse.ArgumentParser(prog="sco-agentctl status")
    opts.add_argument("--json", action="store_true", help="machine-readable output")
    flags = opts.parse_args(rest)
    try:
        config = load(args.config)
    except ConfigError as e:
        print(f"sco-agentctl: {e}", file=sys.stderr)
        return 2
    from agentctl.status import AgentFiles, render_text, summarize

    rd, sd = config.paths.runtime_dir, config.paths.state_dir
    supervisorctl = os.path.join(os.path.dirname(sys.executable), "supervisorctl")
    try:
        procs = subprocess.run([supervisorctl, "-c", _supervisord_conf(), "status"], capture_output=True, check=False,
                               text=True, timeout=10, env=_supervisor_env(args.config)).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        procs = f"(supervisord unreachable: {e})"
    summary = summarize(
        node=config.node.name, hall=config.node.hall,
        processes=[line for line in procs.splitlines() if line.strip()],
        files=AgentFiles(
            notices=_read_json(os.path.join(sd, "notice.json")),
            contract=_read_json(os.path.join(rd, "contract.json")),
            drains=_read_json(os.path.join(sd, "executor.json")),
            verifier=_read_json(os.path.join(sd, "verdicts.json")),
            spool=_spool_status(config)),
        now=time.time())
    print(ujson.dumps(summary, indent=2) if flags.json else render_text(summary), end="\n" if flags.json else "")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="sco-agentctl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="agent configuration (default $SCO_AGENT_CONFIG)")
    parser.add_argument("command", choices=["status", "supervisor", *DELEGATES])
    args, rest = parser.parse_known_args(argv)
    if args.command in DELEGATES:
        module = importlib.import_module(DELEGATES[args.command])
        if args.config:
            rest = ["--config", args.config, *rest]
        return int(module.main(rest) or 0)
    handler = {"status": cmd_status, "supervisor": cmd_supervisor}[args.command]
    return handler(args, rest)


if __name__ == "__main__":
    sys.exit(main())
