"""supervisord_plugins.launch: supervisord without importlib.metadata, importlib.resources and the web UI
until something uses them -- on a real supervisord, with supervisorctl, reload, the status page and
an rpcinterface plugin loaded through the stand-in EntryPoint."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import xmlrpc.client

import pytest

from tests.supervisord_plugins.test_zygote import HEAD
from tests.support.agent_rig import REPO, supervisord_command
from tests.support.procutil import stop_pid
from tests.support.wait import wait_for

# test_zygote's supervisord (the zygote plugin too), with the probe and a plain program.
CONF = HEAD + """
[rpcinterface:probe]
supervisor.rpcinterface_factory = tests.supervisord_plugins.launch_probe:make
note = loaded

[program:sleeper]
command={python} -c "import time; time.sleep(3600)"
startsecs=0
stdout_logfile={d}/sleeper.out
"""

# What a fresh interpreter has after the launcher imported supervisor, and what using each deferred part gives.
CHILD = r"""
import json, sys
from supervisord_plugins import launch
launch.import_supervisord()
import supervisor.compat as compat
watched = ("importlib.metadata", "importlib.resources", "importlib.abc", "zipfile", "csv", "bz2", "lzma",
           "supervisor.web", "html.entities")
before = {n: type(sys.modules[n]).__name__ if n in sys.modules else None for n in watched}
factory = compat.import_spec("supervisord_plugins.zygote:make_rpcinterface")
nested = compat.import_spec("os.path:join")
try:
    compat.import_spec("not a spec!")
    bad = None
except Exception as e:
    bad = type(e).__name__
sample = compat.resource_filename("supervisor", "skel/sample.conf")
resources_real = type(sys.modules["importlib.resources"]).__name__
import importlib.metadata
print(json.dumps({"before": before, "factory": factory.__module__ + "." + factory.__name__,
                  "nested": nested.__module__ + "." + nested.__name__, "bad": bad, "sample": sample,
                  "resources_after_use": resources_real,
                  "metadata_after_import": type(importlib.metadata).__name__,
                  "supervisor_version": importlib.metadata.version("supervisor")}))
"""


def test_stand_ins_keep_the_modules_out_until_used_and_the_real_ones_answer():
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-P", "-c", CHILD], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    # Not imported at all, or (supervisor.web) only its stand-in.
    assert r["before"] == {"importlib.metadata": None, "importlib.resources": None, "importlib.abc": None,
                           "zipfile": None, "csv": None, "bz2": None, "lzma": None,
                           "supervisor.web": "StandIn", "html.entities": "module"}
    assert r["factory"] == "supervisord_plugins.zygote.make_rpcinterface"
    assert r["nested"] in ("posixpath.join", "os.path.join")
    # A spec the real EntryPoint cannot parse fails as it does there (supervisor turns it into a config error).
    assert r["bad"] == "AttributeError"
    assert os.path.isfile(r["sample"]) and r["resources_after_use"] == "module"
    assert r["metadata_after_import"] == "module" and r["supervisor_version"] == "4.3.0"


def test_the_stand_in_entry_point_parses_specs_as_the_real_one():
    import importlib.metadata

    from supervisord_plugins import launch

    assert launch._SPEC.pattern == importlib.metadata.EntryPoint.pattern.pattern
    for spec in ("supervisord_plugins.zygote:make_rpcinterface", "os.path:join", "os", "os.path : join"):
        assert launch.EntryPoint(None, spec, None).load() is importlib.metadata.EntryPoint(None, spec, None).load()


class LeanSupervisor:
    def __init__(self, d: str) -> None:
        self.d = d
        self.conf = os.path.join(d, "supervisord.conf")
        with open(self.conf, "w") as f:
            f.write(CONF.format(d=d, python=sys.executable, zygote="events = off"))
        self.env = dict(os.environ, PYTHONPATH=REPO)
        self.proc = subprocess.Popen([*supervisord_command(), "-c", self.conf], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def ctl(self, *args: str) -> str:
        return subprocess.run([sys.executable, "-m", "supervisor.supervisorctl", "-c", self.conf, *args],
                              env=self.env, capture_output=True, text=True, timeout=30, check=False).stdout

    def rpc(self) -> xmlrpc.client.ServerProxy:
        return xmlrpc.client.ServerProxy("http://localhost", transport=UnixTransport(os.path.join(self.d, "sup.sock")))

    def get(self, path: str) -> bytes:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(os.path.join(self.d, "sup.sock"))
            s.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


class UnixTransport(xmlrpc.client.Transport):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def make_connection(self, host):  # type: ignore[override]
        import http.client

        path = self.path

        class Connection(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.connect(path)

        return Connection("localhost")


@pytest.fixture
def lean(tmp_path):
    s = LeanSupervisor(str(tmp_path))
    wait_for(lambda: "RUNNING" in s.ctl("status", "sleeper"), 30, "sleeper RUNNING")
    yield s
    stop_pid(s.proc.pid, "supervisord", timeout=30)
    s.proc.wait(timeout=30)


def test_real_supervisord_through_the_launcher(lean):
    server = lean.rpc()
    # The plugin was loaded through the stand-in EntryPoint, with its section's keys.
    assert server.probe.getNote() == "loaded"
    modules = server.probe.modules()
    assert modules["importlib.metadata"] == "absent" and modules["zipfile"] == "absent"
    assert modules["importlib.resources"] == "absent" and modules["supervisor.web"] == "stand-in"
    assert modules["supervisor.templating"] == "absent"
    assert server.supervisor.getState()["statename"] == "RUNNING"
    assert server.zygote.getState()["installed"]
    # supervisorctl, a restart, a reload: as without the launcher.
    pid = server.supervisor.getProcessInfo("sleeper")["pid"]
    assert lean.ctl("restart", "sleeper") == "sleeper: stopped\nsleeper: started\n"
    assert server.supervisor.getProcessInfo("sleeper")["pid"] not in (0, pid)
    lean.ctl("reload")
    wait_for(lambda: "RUNNING" in lean.ctl("status", "sleeper"), 30, "sleeper RUNNING after reload")
    assert lean.rpc().probe.getNote() == "loaded"
    assert lean.rpc().probe.modules()["supervisor.web"] == "stand-in"
    # The status page: the real web UI is imported at its first request and answers it.
    page = lean.get("/index.html")
    assert page.startswith(b"HTTP/1.0 200") and b"sleeper" in page, page[:300]
    assert lean.rpc().probe.modules()["supervisor.web"] == "real"
    assert lean.rpc().probe.modules()["supervisor.templating"] == "real"
    assert lean.get("/index.html").startswith(b"HTTP/1.0 200")
