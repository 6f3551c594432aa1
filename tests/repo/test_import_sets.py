"""The import set of every agent process: heavy modules stay out of the processes that do not need them.

Each process is started the way it starts in production, as far as memory is concerned:
a fresh interpreter imports its main module and builds its core object from a
configuration (sockets, state files and all, in a temp directory), then lists
``sys.modules``. What a module costs is in docs/footprint.md (http.client + ssl ≈ 4 MiB,
asyncio ≈ 5 MiB, dataclasses/inspect ≈ 1 MiB, argparse 0.4 MiB per process, ...).
A failure here means a new import made a process heavier: import it lazily, where it is
used, or say in docs/footprint.md why the process needs it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Build the process's core object as its main() would, then report sys.modules.
CHILD = r"""
import importlib, json, os, sys
name, module, d, scheduler = sys.argv[1:5]
mod = importlib.import_module(module)
import zmq
from common import ipc
from common.config import build
from common.log import Logger
config = build({
    "node": {"name": "node-a", "scheduler": scheduler},
    "kubernetes": {"api_url": "http://127.0.0.1:1"},
    "paths": {"runtime_dir": os.path.join(d, "run"), "state_dir": os.path.join(d, "state")},
    "relay": {"servers": []}, "metadata": {"provider": "none"}, "spool": {"size_mb": 1},
    "agent_socket": {"path": os.path.join(d, "run", "agent.sock")},
    "contract": {"launch_path": os.path.join(d, "none.json"), "trust_dir": os.path.join(d, "trust")},
})
ipc.ensure_runtime_dir(config.paths.runtime_dir)
ctx = zmq.Context()
log = Logger(name, stream=open(os.devnull, "w"))
if name == "process_events":
    from common.runtime import SpoolLink
    SpoolLink(ctx, config, name, log)
else:
    core = getattr(mod, name.capitalize())(config, log, ctx)
    if hasattr(core, "close"):
        core.close()
ctx.destroy(linger=0)
print(json.dumps(sorted(sys.modules)))
"""

# Never in any agent process: the reasons are in docs/footprint.md and the README.
EVERYWHERE = {"requests", "kubernetes", "urllib3", "argparse", "uuid"}
# Only the watcher talks NATS (asyncio, nats-py, which pulls logging) and verifies signatures.
NOT_WATCHER = {"asyncio", "nats", "logging", "cryptography", "concurrent.futures"}
# Only the watcher and the executor make HTTP calls (the spool's shipper imports it when it ships).
NO_HTTP = {"http.client", "ssl", "email", "common.http"}

PROCESSES = {
    # process: (main module, forbidden modules)
    # What supervisord adds to forward process events (it has preloaded PRELOAD anyway).
    "process_events": ("supervisord_plugins.process_events", EVERYWHERE | NOT_WATCHER | NO_HTTP),
    "spool": ("spool.__main__", EVERYWHERE | NOT_WATCHER | NO_HTTP),
    "verifier": ("verifier.__main__", EVERYWHERE | NOT_WATCHER | NO_HTTP),
    "executor": ("executor.__main__", EVERYWHERE | NOT_WATCHER),
    # cryptography is imported when a signature is verified, never at start without a contract.
    # asyncio and nats-py come in through stand-ins that keep these out until used
    # (watcher/asyncio_import.py, docs/footprint.md "fourth pass").
    "watcher": ("watcher.__main__", EVERYWHERE | {"cryptography", "logging", "traceback", "concurrent.futures"}),
}


def modules_of(name: str, module: str, tmp_path, scheduler: str = "none") -> set[str]:
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", CHILD, name, module, str(tmp_path), scheduler], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_process_imports_nothing_heavy_it_does_not_use(name, tmp_path):
    module, forbidden = PROCESSES[name]
    loaded = modules_of(name, module, tmp_path)
    assert module in loaded
    heavy = sorted(m for m in loaded if m in forbidden or m.split(".")[0] in forbidden)
    assert not heavy, f"{name} imports {heavy}"


# Each scheduler is its own sub-package of executor/, imported only on a node that runs it
# (executor.scheduler.SCHEDULERS): a Kubernetes node never loads the Slurm code, nor the reverse.
SCHEDULER_CODE = {"kubernetes": "executor.kube", "slurm": "executor.slurm"}


@pytest.mark.parametrize("scheduler", ["none", *sorted(SCHEDULER_CODE)])
def test_the_executor_imports_its_own_scheduler_only(scheduler, tmp_path):
    loaded = modules_of("executor", "executor.__main__", tmp_path, scheduler)
    for other, package in SCHEDULER_CODE.items():
        mine = {m for m in loaded if m == package or m.startswith(package + ".")}
        if other == scheduler:
            assert f"{package}.scheduler" in mine
        else:
            assert not mine, f"a {scheduler} executor imports {sorted(mine)}"
    if scheduler == "none":   # no scheduler: no HTTP client either
        assert not loaded & NO_HTTP, sorted(loaded & NO_HTTP)


def test_the_check_sees_a_heavy_import(tmp_path):
    # The harness itself: a module known to pull http.client is reported.
    loaded = modules_of("process_events", "common.http", tmp_path)
    assert "http.client" in loaded and "ssl" in loaded
