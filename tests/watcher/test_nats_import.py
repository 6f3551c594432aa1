"""watcher.nats_import: nats-py without JetStream and importlib.metadata until something needs them.

Run in a fresh interpreter (what is imported is the point), against a real nats-server: a
message with headers still arrives with its headers, and a request nobody answers (a status
header, the path that reads ``nats.js.api``) raises NoRespondersError, loading the real
``nats.js`` then.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.proven import NATS_PY, installed_version
from tests.support.agent_rig import REPO
from tests.support.nats_rig import NatsServer

CHILD = r"""
import asyncio, json, sys
from watcher.nats_import import import_nats
nats = import_nats([sys.argv[1]])
before = sorted(m for m in sys.modules if m.startswith(("nats.js", "importlib.metadata", "email")))
from nats.aio.client import __version__

async def main():
    nc = await nats.connect(sys.argv[1])
    got = asyncio.get_running_loop().create_future()

    async def heard(msg):
        if not got.done():
            got.set_result(msg)

    await nc.subscribe("t", cb=heard)
    await nc.publish("t", b"x", headers={"Nats-Msg-Id": "abc"})
    msg = await asyncio.wait_for(got, 10)
    # A request nobody answers: the server replies with a 503 status header, which nats-py
    # reads through nats.js.api.Header -- the stand-in imports the real module here.
    try:
        await nc.request("nobody.home", b"", timeout=5)
        no_responders = False
    except nats.errors.NoRespondersError:
        no_responders = True
    await nc.close()
    return msg.headers, no_responders

headers, no_responders = asyncio.run(main())
import importlib.metadata
print(json.dumps({"before": before, "version": __version__, "real": importlib.metadata.version("nats-py"),
                  "headers": headers, "no_responders": no_responders, "js_loaded": "nats.js.client" in sys.modules}))
"""


def nats_py(version: str) -> str:
    """A PYTHONPATH entry holding nats-py ``version`` ("" for the venv's own): pip-installed once
    (pure Python, no dependencies) into the tests' cache, outside the repository."""
    if version == installed_version("nats-py", "nats"):
        return ""
    target = Path(os.environ.get("SCO_CACHE") or Path.home() / ".cache" / "sco-agent") / f"nats-py-{version}"
    if not (target / f"nats_py-{version}.dist-info").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        "--upgrade", "--target", str(target), f"nats-py=={version}"], check=True, timeout=300)
    return str(target)


@pytest.mark.parametrize("version", NATS_PY)
def test_nats_is_imported_lean_and_still_handles_headers(tmp_path, version):
    """For each nats-py the lean import was tested with (common/proven.py NATS_PY, a range, not one pin)."""
    server = NatsServer().start()
    path = os.pathsep.join(filter(None, [nats_py(version), REPO]))
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, server.url], env=dict(os.environ, PYTHONPATH=path),
                             capture_output=True, text=True, timeout=60, check=False)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert r["before"] == ["nats.js"]       # the stand-in only: no JetStream, no metadata, no email
    assert r["version"] == r["real"] == version   # nats-py's CONNECT still says its real version
    assert r["headers"] == {"Nats-Msg-Id": "abc"}
    assert r["no_responders"] and r["js_loaded"]   # the status header path loaded the real nats.js
