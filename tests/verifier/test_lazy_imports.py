"""What the verifier imports before and after its first read: subprocess (and http.client) only
when a read needs it -- the verifier's footprint is measured like the executor's and the watcher's.

A fresh interpreter builds the Verifier as its main() does, lists ``sys.modules``, then makes one
read through the node's own reader (a Slurm read of a command that is not there: the read fails,
the import has happened), and lists them again.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r"""
import json, os, sys
d, scheduler = sys.argv[1:3]
import zmq
from common import ipc
from common.config import build
from common.log import Logger
from verifier.__main__ import Verifier
from verifier.scheduler_read import ReadError, reader_for
config = build({
    "node": {"name": "node-a", "scheduler": scheduler},
    "kubernetes": {"api_url": "http://127.0.0.1:1", "timeout_s": 0.5},
    "slurm": {"conf": os.path.join(d, "no-slurm.conf")},
    "paths": {"runtime_dir": os.path.join(d, "run"), "state_dir": os.path.join(d, "state")},
})
ipc.ensure_runtime_dir(config.paths.runtime_dir)
ctx = zmq.Context()
v = Verifier(config, Logger("verifier", stream=open(os.devnull, "w")), ctx)
idle = sorted(sys.modules)
os.environ["PATH"] = os.path.join(d, "empty-bin")   # sinfo is not found: the read fails, cleanly
error = ""
try:
    reader_for(config)().read()
except ReadError as e:
    error = str(e)
ctx.destroy(linger=0)
print(json.dumps({"idle": idle, "read": sorted(sys.modules), "error": error}))
"""


def first_read(tmp_path: Path, scheduler: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), scheduler], cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=REPO), capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize(("scheduler", "needs"), [("slurm", "subprocess"), ("kubernetes", "http.client")])
def test_the_verifier_imports_what_a_read_needs_at_its_first_read(tmp_path: Path, scheduler: str,
                                                                  needs: str) -> None:
    seen = first_read(tmp_path, scheduler)
    assert "verifier.scheduler_read" in seen["idle"]
    assert not {"subprocess", "http.client", "ssl"} & set(seen["idle"])   # not while idle, on either node
    assert needs in seen["read"] and seen["error"]                     # the read happened (and failed)
    if scheduler == "slurm":
        assert seen["error"].startswith("sinfo:")
    else:   # a Kubernetes node's verifier never loads subprocess, not even reading
        assert "subprocess" not in seen["read"]
