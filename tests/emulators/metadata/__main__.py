"""``python -m tests.emulators.metadata --port 0 --ready-file PATH [--providers aws,gcp]``."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from common.fsutil import read_bounded
from tests.emulators._process import serve_main
from tests.emulators.metadata.app import PROVIDERS, MetadataApp


def main(argv: Sequence[str] | None = None) -> int:
    return serve_main(argv, "python -m tests.emulators.metadata", _add_arguments, _build)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--providers", default=",".join(PROVIDERS),
                        help=f"comma-separated subset of {','.join(PROVIDERS)}")
    parser.add_argument("--scenario", help='JSON file: {"aws": {"instance_id": ...}, ...}')


def _build(args: argparse.Namespace) -> MetadataApp:
    scenario = {}
    if args.scenario:
        scenario = json.loads(read_bounded(args.scenario, 1024 * 1024))
        if not isinstance(scenario, dict):
            raise ValueError(f"{args.scenario}: the scenario must be a JSON object")
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    return MetadataApp(providers, scenario)


if __name__ == "__main__":
    sys.exit(main())
