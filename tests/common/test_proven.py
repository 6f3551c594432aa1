"""common/proven.py: each lean shortcut runs only on the CPython and library versions it was tested
with; on any other it steps aside -- the plain import, supervisor's own exec -- says so once, and the
agent still works, only heavier.

"An unknown version" is faked the way a newer node image would present it: for CPython, a
``sitecustomize`` (imported by ``site`` at start, before any of our code) that makes
``sys.version_info`` say 3.99; for a library, the version its dist-info directory names.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xmlrpc.client
from pathlib import Path

import pytest

from common import proven
from supervisord_plugins import wake, zygote
from tests.support.agent_rig import REPO
from tests.support.nats_rig import NatsServer

FAKE_PYTHON = """import collections, sys
_V = collections.namedtuple("version_info", "major minor micro releaselevel serial")
sys.version_info = _V(3, 99, 0, "final", 0)
"""


def faked_python_path(tmp_path: Path) -> str:
    """A PYTHONPATH whose sitecustomize makes the interpreter say CPython 3.99."""
    site = tmp_path / "fake-3.99"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(FAKE_PYTHON)
    return os.pathsep.join([str(site), REPO])


def test_the_running_interpreter_and_libraries_are_the_tested_ones():
    """What tests/run.sh runs on is admitted: every shortcut is on in this suite."""
    assert proven.python_series() in proven.TESTED_PYTHONS
    assert proven.installed_version("nats-py", "nats") in proven.NATS_PY
    assert proven.installed_version("supervisor", "supervisor") in proven.SUPERVISOR
    assert proven.unproven(proven.WATCHER + proven.SUPERVISORD) == []


def test_an_unknown_python_or_library_version_is_named_with_what_was_tested(monkeypatch):
    monkeypatch.setattr(proven, "python_series", lambda: (3, 99))
    reasons = proven.unproven(proven.WATCHER + proven.SUPERVISORD)
    assert len(reasons) == 6
    assert all("tested on CPython 3.11, 3.12, 3.13, this is 3.99: stepping aside" in r for r in reasons)
    monkeypatch.undo()
    monkeypatch.setattr(proven, "installed_version", lambda distribution, package: "9.9.9")
    assert proven.why_not("watcher.asyncio_import") == ""          # CPython only
    assert "tested with nats-py 2.15.0, 2.16.0, this is nats-py 9.9.9" in proven.why_not("watcher.nats_import")
    assert "supervisor 4.3.0, this is supervisor 9.9.9" in proven.why_not("supervisord_plugins.zygote")


def test_a_version_is_read_from_the_dist_info_beside_the_package(tmp_path, monkeypatch):
    (tmp_path / "fakepkg").mkdir()
    (tmp_path / "fakepkg" / "__init__.py").write_text("")
    (tmp_path / "fake_pkg-1.2.3.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert proven.installed_version("fake-pkg", "fakepkg") == "1.2.3"
    assert proven.installed_version("fake-pkg", "no_such_package") == ""
    (tmp_path / "fake_pkg-1.2.4.dist-info").mkdir()              # two: which one is loaded is unknown
    assert proven.installed_version("fake-pkg", "fakepkg") == ""



WATCHER_PLAIN = r"""
import json, socket, sys, types
from common import proven
from watcher.asyncio_import import asyncio
from watcher import idna_codec
from watcher.nats_import import import_nats

def real(name):
    module = sys.modules.get(name)
    return module is not None and type(module) is types.ModuleType and hasattr(module, "__file__")

idna_codec.install()
socket.getaddrinfo("localhost", 4222)        # the idna codec: encodings.idna itself on the plain path
nats = import_nats([sys.argv[1]])

async def main():
    nc = await nats.connect(sys.argv[1])
    got = asyncio.get_running_loop().create_future()

    async def heard(msg):
        if not got.done():
            got.set_result(msg.data)

    await nc.subscribe("t", cb=heard)
    await nc.publish("t", b"plain path")
    data = await asyncio.wait_for(got, 10)
    await nc.close()
    return data.decode()

print(json.dumps({"python": list(sys.version_info[:2]), "reasons": proven.unproven(proven.WATCHER),
                  "real": {m: real(m) for m in ("logging", "concurrent.futures", "traceback", "encodings.idna",
                                                "nats.js.client", "importlib.metadata")},
                  "heard": asyncio.run(main())}))
"""


def test_on_an_unknown_python_the_watcher_imports_plainly_and_still_hears_the_relay(tmp_path):
    """The asyncio stand-ins, the idna codec and the lean nats-py all step aside: each real module is
    loaded (the heavier path), and a message still arrives through nats-py."""
    server = NatsServer().start()
    try:
        out = subprocess.run([sys.executable, "-c", WATCHER_PLAIN, server.url],
                             env=dict(os.environ, PYTHONPATH=faked_python_path(tmp_path)),
                             capture_output=True, text=True, timeout=60, check=False)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert r["python"] == [3, 99]
    assert r["heard"] == "plain path"
    assert all(r["real"].values()), r["real"]       # the lean path loads none of these at this point
    assert [reason.split(":")[0] for reason in r["reasons"]] == list(proven.WATCHER)


def test_the_same_child_on_the_tested_python_takes_the_lean_path(tmp_path):
    """The control: without the fake, the same steps leave those modules out (or stand-ins)."""
    server = NatsServer().start()
    try:
        out = subprocess.run([sys.executable, "-c", WATCHER_PLAIN, server.url], env=dict(os.environ, PYTHONPATH=REPO),
                             capture_output=True, text=True, timeout=60, check=False)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert r["heard"] == "plain path" and r["reasons"] == []
    assert not any(r["real"][m] for m in ("logging", "concurrent.futures", "traceback", "encodings.idna",
                                          "nats.js.client", "importlib.metadata")), r["real"]


def test_on_an_unknown_python_supervisord_execs_its_workers_and_says_why(tmp_path, monkeypatch):
    """A real supervisord through the lean launcher: the launcher, the zygote and the wake all step
    aside; the workers are exec'd as supervisor does it, restarts still work, and supervisord's log
    names each shortcut that is off."""
    from tests.supervisord_plugins import test_zygote

    # The rig puts its REPO first on supervisord's PYTHONPATH: the fake goes in front of it.
    monkeypatch.setattr(test_zygote, "REPO", faked_python_path(tmp_path))
    d = tmp_path / "sup"
    d.mkdir()
    sup = test_zygote.start_supervisor(str(d))
    _transport, cmdline = test_zygote._transport, test_zygote.cmdline
    try:
        pid = sup.running("a")
        report = sup.report("a", pid)
        assert not report["forked"] and "probe-a" in cmdline(pid)      # exec'd, not forked in place
        sup.ctl("restart", "a")
        assert not sup.report("a", sup.running("a", not_pid=pid))["forked"]
        state = xmlrpc.client.ServerProxy("http://localhost", transport=_transport(sup)).zygote.getState()
        assert not state["installed"] and "this is 3.99" in state["error"]
        assert state["wakes"] == 0 and "this is 3.99" in state["wake_error"]
        log = sup.log("supervisord.log")
        for shortcut in proven.SUPERVISORD:
            assert f"zygote: {shortcut}: tested on CPython" in log, log[-2000:]
    finally:
        sup.stop()


@pytest.mark.parametrize("shortcut", ["zygote", "wake"])
def test_an_unknown_supervisor_leaves_its_execve_and_signal_receiver_alone(monkeypatch, shortcut):
    monkeypatch.setattr(proven, "installed_version", lambda distribution, package: "9.9.9")

    class Options:
        def execve(self, filename: str, argv: list[str], env: dict[str, str]) -> None:
            raise AssertionError("not called here")

    class Receiver:
        def receive(self, sig: int, frame: object) -> None:
            pass

    options = Options()
    options.signal_receiver = Receiver()            # type: ignore[attr-defined]
    options.get_socket_map = dict                   # type: ignore[attr-defined]
    supervisord = type("Supervisord", (), {"options": options})()
    execve, receive = options.execve, options.signal_receiver.receive   # type: ignore[attr-defined]
    if shortcut == "zygote":
        made = zygote._make_zygote(supervisord, "", "")
        assert made.error.startswith("supervisord_plugins.zygote: tested with supervisor 4.3.0")
        assert options.execve == execve and made.preloaded == {}
    else:
        waker, error = wake.install(supervisord)
        assert waker is None and "supervisor 9.9.9" in error
        assert options.signal_receiver.receive == receive   # type: ignore[attr-defined]


def test_a_process_says_once_at_start_which_shortcut_stepped_aside(tmp_path, monkeypatch, capsys):
    """common.runtime.start: the watcher passes its shortcuts; each that steps aside is one warning."""
    from common.runtime import start
    from tests.support.agent_rig import write_config

    config = str(tmp_path / "agent.toml")
    write_config(config, {"node": {"name": "node-a"}, "paths": {"runtime_dir": str(tmp_path / "run"),
                                                                "state_dir": str(tmp_path / "state")}})
    monkeypatch.setattr(proven, "installed_version", lambda distribution, package: "9.9.9")
    start("watcher", ["--config", config], shortcuts=proven.WATCHER)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    off = [line for line in lines if line.get("msg") == "process.shortcut_off"]
    assert [line["level"] for line in off] == ["warning"]                 # nats-py only: once
    assert off[0]["detail"].startswith("watcher.nats_import: tested with nats-py")
    start("watcher", ["--config", config])                                # no shortcuts: nothing said
    assert "shortcut_off" not in capsys.readouterr().err
