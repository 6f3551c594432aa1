"""supervisord_plugins.zygote under a real supervisord: workers forked in place, everything supervisorctl does intact.

One supervisord (this venv's supervisor, the version setup.cfg pins) runs probe programs
(tests/supervisord_plugins/zygote_probe.py) through console scripts written here, as pip writes them.
If a supervisor upgrade stops calling ``options.execve`` in the child, the probes are
exec'd instead and ``test_workers_are_forked_in_place`` fails: the zygote's one
dependence on supervisor's internals is checked here, not discovered on a node.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xmlrpc.client
from typing import Any

import pytest

from supervisord_plugins.zygote import OWN_PACKAGES, born_holding_stops, entry_point, take_stops
from tests.support.agent_rig import supervisord_command, waking
from tests.support.procutil import pid_alive, stop_pid
from tests.support.wait import wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = "#!{python}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {module} import main\n" \
         "if __name__ == '__main__':\n    sys.exit(main())\n"

# supervisord with the zygote for the test probes; {zygote} adds keys to its section.
HEAD = """
[unix_http_server]
file={d}/sup.sock

[supervisord]
nodaemon=true
logfile={d}/supervisord.log
pidfile={d}/supervisord.pid

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[rpcinterface:zygote]
supervisor.rpcinterface_factory = supervisord_plugins.zygote:make_rpcinterface
packages = tests
{zygote}

[supervisorctl]
serverurl=unix://{d}/sup.sock
"""

CONF = HEAD + """
[program:a]
command={d}/bin/probe-a --flag x
environment=PROBE_VAR="from-a"
directory={d}
startsecs=0
autorestart=true
stdout_logfile={d}/a.out
stderr_logfile={d}/a.err

[program:b]
command={d}/bin/probe-b
startsecs=0
autorestart=true
stdout_logfile={d}/b.out
stderr_logfile={d}/b.err

[program:other]
command={d}/bin/probe-other
startsecs=0
autorestart=true
stdout_logfile={d}/other.out
"""


def write_script(path: str, python: str, module: str = "tests.supervisord_plugins.zygote_probe") -> None:
    with open(path, "w") as f:
        f.write(SCRIPT.format(python=python, module=module))
    os.chmod(path, 0o755)


class Supervisor:
    def __init__(self, d: str) -> None:
        self.d = d
        self.conf = os.path.join(d, "supervisord.conf")
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.path.join(d, "lib")]))
        self.env.pop("PYTHONUNBUFFERED", None)
        self.proc = subprocess.Popen([*supervisord_command(), "-c", self.conf],
                                     env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def ctl(self, *args: str) -> str:
        return subprocess.run([sys.executable, "-m", "supervisor.supervisorctl", "-c", self.conf, *args],
                              env=self.env, capture_output=True, text=True, timeout=30, check=False).stdout

    def status(self) -> dict[str, tuple[str, int]]:
        out = {}
        for line in self.ctl("status").splitlines():
            parts = line.split()
            pid = int(parts[parts.index("pid") + 1].rstrip(",")) if "pid" in parts else 0
            out[parts[0]] = (parts[1], pid)
        return out

    def running(self, program: str, not_pid: int = 0) -> int:
        """Wait until ``program`` is RUNNING with a pid other than ``not_pid``; the pid."""
        def check() -> int:
            state, pid = self.status().get(program, ("", 0))
            return pid if state == "RUNNING" and pid != not_pid else 0
        return wait_for(check, 30, f"{program} RUNNING")

    def report(self, program: str, pid: int) -> dict:
        """The probe's report of the process ``pid``, from the program's stdout log."""
        def find() -> dict | None:
            try:
                with open(os.path.join(self.d, f"{program}.out")) as f:
                    lines = [json.loads(line) for line in f if line.startswith("{")]
            except FileNotFoundError:
                return None
            return next((r for r in lines if r["pid"] == pid), None)
        return wait_for(find, 30, f"{program}'s report from pid {pid}")

    def log(self, name: str) -> str:
        try:
            with open(os.path.join(self.d, name)) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        with waking(os.path.join(self.d, "sup.sock")):   # its reaps without a 1 s wait each
            stop_pid(self.proc.pid, "supervisord", timeout=30)
            self.proc.wait(timeout=30)


def start_supervisor(d: str) -> Supervisor:
    os.makedirs(os.path.join(d, "bin"))
    os.makedirs(os.path.join(d, "lib"))
    with open(os.path.join(d, "lib", "zygote_stale.py"), "w") as f:
        f.write('"""Preloaded by the zygote in the test; touched to make it stale."""\n')
    write_script(os.path.join(d, "bin", "probe-a"), sys.executable)
    write_script(os.path.join(d, "bin", "probe-b"), sys.executable)
    # Another interpreter line than supervisord's: must be exec'd, not run in place.
    write_script(os.path.join(d, "bin", "probe-other"), sys.executable + " -u")
    with open(os.path.join(d, "supervisord.conf"), "w") as f:
        f.write(CONF.format(d=d, zygote="preload = zygote_stale"))
    return Supervisor(d)


@pytest.fixture(scope="module")
def sup(tmp_path_factory):
    """One supervisord for the tests that leave it as they found it (a supervisord stop takes seconds)."""
    s = start_supervisor(str(tmp_path_factory.mktemp("zygote")))
    yield s
    s.stop()


@pytest.fixture
def own_sup(tmp_path):
    s = start_supervisor(str(tmp_path))
    yield s
    s.stop()


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


def test_workers_are_forked_in_place(sup):
    a = sup.report("a", sup.running("a"))
    b = sup.report("b", sup.running("b"))
    for r in (a, b):
        assert r["forked"], "not forked in place: did a supervisor upgrade stop calling options.execve?"
        assert r["ppid"] == sup.proc.pid
        assert "supervisord" in cmdline(r["pid"])
        assert r["sigchld_default"]   # not supervisord's handler
        assert r["stdin"] == 0
    assert a["comm"] == "probe-a" and b["comm"] == "probe-b"
    # What an exec would have given the program: its argv, environment= and directory=.
    assert a["argv"] == ["--flag", "x"] and a["probe_var"] == "from-a" and a["program"] == "a"
    assert a["cwd"] == sup.d and b["probe_var"] is None
    assert "probe on stderr" in sup.log("a.err")
    server = xmlrpc.client.ServerProxy("http://localhost", transport=_transport(sup))
    state = server.zygote.getState()
    assert state["installed"] and state["modules"] > 10
    # Another interpreter than supervisord's: exec'd as usual.
    pid = sup.running("other")
    r = sup.report("other", pid)
    assert not r["forked"] and "probe-other" in cmdline(pid)


def test_restart_stop_start_and_crash_isolation(sup):
    a, b = sup.running("a"), sup.running("b")
    sup.ctl("restart", "a")
    a2 = sup.running("a", not_pid=a)
    assert sup.report("a", a2)["forked"] and not pid_alive(a)
    # SIGKILL: supervisord sees the exit and autorestarts; the sibling is untouched.
    os.kill(a2, signal.SIGKILL)
    a3 = sup.running("a", not_pid=a2)
    assert sup.report("a", a3)["forked"]
    assert sup.status()["b"] == ("RUNNING", b)
    # stop: SIGTERM reaches the worker's own handler, which exits 0.
    sup.ctl("stop", "a")
    wait_for(lambda: sup.status()["a"][0] == "STOPPED", 30, "a STOPPED")
    assert "probe stopping" in sup.log("a.out")
    assert "stopped: a (exit status 0)" in sup.log("supervisord.log")
    sup.ctl("start", "a")
    assert sup.report("a", sup.running("a"))["forked"]
    assert sup.status()["b"] == ("RUNNING", b)


def test_exit_codes_and_tracebacks_reach_supervisord(sup):
    for name, mode in (("crash", "raise"), ("three", "exit3")):
        write_script(os.path.join(sup.d, "bin", f"probe-{name}"), sys.executable)
        with open(sup.conf, "a") as f:
            f.write(f"\n[program:{name}]\ncommand={sup.d}/bin/probe-{name} {mode}\nautostart=false\n"
                    f"autorestart=false\nstartsecs=0\nstdout_logfile={sup.d}/{name}.out\n"
                    f"stderr_logfile={sup.d}/{name}.err\n")
    sup.running("a")
    sup.ctl("update")
    sup.ctl("start", "crash", "three")
    wait_for(lambda: "exited: three (exit status 3" in sup.log("supervisord.log"), 30, "three exits 3")
    wait_for(lambda: "exited: crash (exit status 1" in sup.log("supervisord.log"), 30, "crash exits 1")
    assert "RuntimeError: probe crashed on purpose" in sup.log("crash.err")
    assert sup.status()["a"][0] == "RUNNING"


def test_changed_preloaded_module_falls_back_to_exec(own_sup):
    sup = own_sup
    a = sup.running("a")
    assert sup.report("a", a)["forked"]
    # `reload` re-reads the configuration and restarts everything: still forked in place.
    sup.ctl("reload")
    a = sup.running("a", not_pid=a)
    assert sup.report("a", a)["forked"]
    stale = os.path.join(sup.d, "lib", "zygote_stale.py")
    st = os.stat(stale)
    os.utime(stale, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    sup.ctl("restart", "a")
    a2 = sup.running("a", not_pid=a)
    assert not sup.report("a", a2)["forked"] and "probe-a" in cmdline(a2)


def test_entry_point_reads_only_our_console_scripts(tmp_path):
    script = str(tmp_path / "sco-x")
    write_script(script, "/opt/py/bin/python", "spool.__main__")
    assert entry_point(script, OWN_PACKAGES, python="/opt/py/bin/python") == ("spool.__main__", "main")
    assert entry_point(script, OWN_PACKAGES, python="/usr/bin/python3") is None
    write_script(script, "/opt/py/bin/python", "pip._internal.cli.main")
    assert entry_point(script, OWN_PACKAGES, python="/opt/py/bin/python") is None
    with open(script, "wb") as f:
        f.write(b"\x7fELF\x02\x01\x01")
    assert entry_point(script, OWN_PACKAGES, python="/opt/py/bin/python") is None
    assert entry_point(str(tmp_path / "missing")) is None


def test_every_program_in_supervisord_conf_may_run_in_place():
    """Each sco-* command supervisord.conf runs comes from a package in OWN_PACKAGES.

    A console script moved to a package the zygote does not know would still run,
    exec'd, with nothing failing but the memory bill: this is where it is noticed.
    """
    import configparser

    setup = configparser.ConfigParser()
    setup.read(os.path.join(REPO, "setup.cfg"))
    scripts = dict(line.replace(" ", "").split("=", 1)
                   for line in setup["options.entry_points"]["console_scripts"].split("\n") if line.strip())
    conf = configparser.RawConfigParser(strict=False)
    conf.read(os.path.join(REPO, "supervisord.conf"))
    commands = [conf[s]["command"].split()[0] for s in conf.sections() if "command" in conf[s]]
    assert len(commands) >= 4 and all(c in scripts for c in commands), (commands, scripts)
    for command in commands:
        module = scripts[command].split(":")[0]
        assert module.split(".")[0] in OWN_PACKAGES, f"{command} ({module}) would be exec'd"


def _transport(sup: Supervisor) -> xmlrpc.client.Transport:
    from supervisor.xmlrpc import SupervisorTransport

    return SupervisorTransport(None, None, f"unix://{sup.d}/sup.sock")


def test_a_failed_preload_or_a_changed_supervisor_leaves_exec_alone():
    from supervisord_plugins.zygote import make_rpcinterface

    class Options:
        def execve(self, filename: str, argv: list[str], env: dict[str, str]) -> None:
            raise AssertionError("not called here")

    class Supervisord:
        options = Options()

    sup = Supervisord()
    failed = make_rpcinterface(sup, preload="tests.supervisord_plugins.no_such_module", events="off")
    assert not failed.getState()["installed"] and "no_such_module" in failed.getState()["error"]
    assert "execve" not in vars(sup.options)   # the method is still supervisor's own

    class Bare:
        options = object()

    assert "no options.execve" in make_rpcinterface(Bare(), events="off").getState()["error"]


def test_the_preload_has_no_side_effect():
    """What supervisord imports for the workers opens nothing, starts no thread, sets no signal
    handler: importing a worker's code must not do what only its main() may."""
    code = r"""
import json, os, signal, sys, threading
def state():
    return {"fds": sorted(os.listdir("/proc/self/fd")), "threads": threading.active_count(),
            "signals": {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals()
                        if s not in (signal.SIGKILL, signal.SIGSTOP) and s < 32}}
before = state()
import importlib
from supervisord_plugins.zygote import PRELOAD
for name in PRELOAD:
    importlib.import_module(name)
after = state()
print(json.dumps({"before": before, "after": after, "modules": len(sys.modules)}))
"""
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=REPO),
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    assert r["after"]["threads"] == r["before"]["threads"] == 1
    assert r["after"]["signals"] == r["before"]["signals"]
    # /proc/self/fd lists the descriptor of its own listing too: compare the counts.
    assert len(r["after"]["fds"]) == len(r["before"]["fds"])
    assert r["modules"] > 100



class _Receiver:
    """supervisor.options.SignalReceiver as the fork leaves it in the child: what it took so far."""

    def __init__(self, *signals: int) -> None:
        self._signals_recvd = list(signals)


def _child_status(receiver: _Receiver) -> int:
    """Run the zygote's child path in a fork, as supervisord's child would (the entry returns 0)."""
    from supervisord_plugins.zygote import _run_in_child

    pid = os.fork()
    if pid == 0:
        try:
            _run_in_child(("builtins", "int"), "probe", ["probe"], dict(os.environ), receiver)
        finally:
            os._exit(99)   # not reached: _run_in_child leaves by os._exit
    return os.waitpid(pid, 0)[1]


def test_a_stop_signal_supervisords_handler_took_in_the_child_still_stops_the_worker():
    """A SIGTERM landing between supervisord's fork and the zygote's reset goes to supervisord's
    handler (copied by the fork): raised again, it stops the worker as the default would have."""
    status = _child_status(_Receiver(signal.SIGTERM))
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    # What is not a stop signal (a SIGHUP or SIGCHLD meant for supervisord) is left alone.
    status = _child_status(_Receiver(signal.SIGHUP, signal.SIGCHLD))
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    status = _child_status(_Receiver())
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_python_and_python3_of_one_venv_are_the_same_interpreter(tmp_path):
    """supervisord started as bin/python (the unit, through supervisord_plugins.launch) runs scripts whose
    #! line says bin/python3 in place, and the reverse; another venv's, or another binary, never."""
    from supervisord_plugins.zygote import same_interpreter

    venv, other = tmp_path / "venv" / "bin", tmp_path / "other" / "bin"
    for d in (venv, other):
        d.mkdir(parents=True)
        (d / "python3").symlink_to(sys.executable)
        (d / "python").symlink_to("python3")
    (venv / "python2").symlink_to("/bin/sh")
    assert same_interpreter(str(venv / "python"), str(venv / "python3"))
    assert same_interpreter(str(venv / "python3"), str(venv / "python"))
    assert not same_interpreter(str(venv / "python"), str(other / "python"))
    assert not same_interpreter(str(venv / "python"), str(venv / "python2"))
    assert not same_interpreter("", str(venv / "python"))
    script = str(tmp_path / "sco-x")
    write_script(script, str(venv / "python3"), "spool.__main__")
    assert entry_point(script, OWN_PACKAGES, python=str(venv / "python")) == ("spool.__main__", "main")
    assert entry_point(script, OWN_PACKAGES, python=str(other / "python")) is None


def _fork_with_a_stop_before_the_reset(fork: Any) -> tuple[int, str]:
    """Fork through ``fork``; in the child, a SIGTERM lands before the zygote's reset while a Python
    handler stands in for supervisord's. Returns the child's status and what it saw."""
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda sig, frame: seen.append(sig))
    r, w = os.pipe()
    try:
        pid = fork()
        if pid == 0:
            os.close(r)
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):   # bytecode boundaries: a deliverable signal's handler runs here
                    pass
                pending = signal.SIGTERM in signal.sigpending()
                os.write(w, f"handler={seen} pending={pending}".encode())
                take_stops(_Receiver(*seen))   # the zygote's reset, as _run_in_child makes it
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            said = f.read()
        return os.waitpid(pid, 0)[1], said
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_child_is_born_holding_the_stop_signals_so_none_can_be_lost_before_the_reset():
    """CPython wipes the signals a forked child took before its after-fork code ran
    (``_PySignal_AfterFork``): held from before the fork, a stop signal stays in the kernel, pending,
    and reaches the worker under the default disposition -- the worker ends, as the stop asked."""
    fork = born_holding_stops(os.fork)
    status, said = _fork_with_a_stop_before_the_reset(fork)
    assert said == "handler=[] pending=True"                # no Python handler took it: nothing to wipe
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    # supervisord itself holds nothing once the fork is done.
    assert not set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT}
    # Plain os.fork: the child's copy of the handler takes it at once -- the window CPython may wipe.
    status, said = _fork_with_a_stop_before_the_reset(os.fork)
    assert said == "handler=[15] pending=False"


def test_a_failed_fork_gives_supervisord_its_signals_back():
    def failing() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    with pytest.raises(OSError):
        born_holding_stops(failing)()
    assert not set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT}


def test_the_zygote_wraps_supervisords_fork_once_across_reloads():
    from supervisord_plugins.zygote import _make_zygote

    class Options:
        def fork(self) -> int:
            raise AssertionError("not called here")

        def execve(self, filename: str, argv: list[str], env: dict[str, str]) -> None:
            raise AssertionError("not called here")

    class Supervisord:
        options = Options()

    sup = Supervisord()
    original = sup.options.fork
    assert not _make_zygote(sup, "", "").error
    assert not _make_zygote(sup, "", "").error   # `supervisorctl reload` runs the factory again
    assert sup.options.fork.zygote_original == original
