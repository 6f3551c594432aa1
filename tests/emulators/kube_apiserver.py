"""Run the Kubernetes API-server emulator as a process.

    python -m tests.emulators.kube_apiserver --port 0 --ready-file PATH [options]

The shared emulator command line (``tests.emulators._process``): once both listeners are
up, PATH receives the JSON ready info (url, control_url, port, pid), written atomically;
SIGTERM/SIGINT stop it cleanly; a bad setting exits 2 with the reason on stderr.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tests.emulators._process import serve_main
from tests.emulators.kube import Options
from tests.emulators.kube.app import KubeApp


def _token(text: str) -> tuple[str, str]:
    token, sep, user = text.partition("=")
    if not sep or not token or not user:
        raise argparse.ArgumentTypeError("expected TOKEN=USER")
    return token, user


def _add_arguments(p: argparse.ArgumentParser) -> None:
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


def options_from(args: argparse.Namespace) -> Options:
    return Options(
        policy_versions=tuple(v.strip() for v in args.policy_versions.split(",") if v.strip()),
        server_version=args.server_version, kubelet=not args.no_kubelet, grace_cap=args.grace_cap,
        start_delay=args.start_delay, replicasets=not args.no_replicasets, tick=args.tick,
        tokens=dict(args.token),
    )


def main(argv: Sequence[str] | None = None) -> int:
    return serve_main(argv, "python -m tests.emulators.kube_apiserver", _add_arguments,
                      lambda args: KubeApp(options_from(args)))


if __name__ == "__main__":
    sys.exit(main())
