"""Run the Kubernetes API-server emulator as a process.

    python -m tests.emulators.kube_apiserver --port 0 --ready-file PATH [options]

Once both listeners are up, PATH receives two lines: the API port, then the control port
(written atomically, so a reader never sees half a file). SIGTERM/SIGINT stop it cleanly.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from common.fsutil import write_atomic
from tests.emulators.kube import KubeApiServer, Options


def _token(text: str) -> tuple[str, str]:
    token, sep, user = text.partition("=")
    if not sep or not token or not user:
        raise argparse.ArgumentTypeError("expected TOKEN=USER")
    return token, user


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--port", type=int, default=0, help="API port (0: pick a free one)")
    p.add_argument("--ready-file", help="write 'API_PORT\\nCONTROL_PORT\\n' here once listening")
    p.add_argument("--policy-versions", default="v1",
                   help="policy/* versions served, preferred first: 'v1', 'v1beta1' (a 1.20 server), 'v1,v1beta1'")
    p.add_argument("--server-version", default="v1.37.0", help="gitVersion reported by /version")
    p.add_argument("--no-kubelet", action="store_true", help="no simulated kubelet")
    p.add_argument("--grace-cap", type=float, default=1.0,
                   help="seconds a terminating pod takes at most (min with its grace period)")
    p.add_argument("--start-delay", type=float, default=0.0, help="seconds from bound to Running")
    p.add_argument("--no-replicasets", action="store_true",
                   help="no replacement of deleted ReplicaSet pods and no scheduling")
    p.add_argument("--tick", type=float, default=0.05, help="controller loop period, seconds")
    p.add_argument("--token", action="append", type=_token, default=[], metavar="TOKEN=USER",
                   help="accept only these bearer tokens (repeatable); default: accept anything")
    p.add_argument("--fault-seed", type=int, default=0, help="seed for probabilistic faults")
    return p.parse_args(argv)


def options_from(args: argparse.Namespace) -> Options:
    return Options(
        policy_versions=tuple(v.strip() for v in args.policy_versions.split(",") if v.strip()),
        server_version=args.server_version, kubelet=not args.no_kubelet, grace_cap=args.grace_cap,
        start_delay=args.start_delay, replicasets=not args.no_replicasets, tick=args.tick,
        tokens=dict(args.token), fault_seed=args.fault_seed,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        options = options_from(args)
    except ValueError as err:
        print(f"kube_apiserver: {err}", file=sys.stderr)
        return 2
    server = KubeApiServer(port=args.port, options=options).start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    if args.ready_file:
        write_atomic(args.ready_file, f"{server.port}\n{server.control_port}\n".encode(), mode=0o644)
    print(f"kube_apiserver: serving {server.url} (control {server.control_url})", file=sys.stderr, flush=True)
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
