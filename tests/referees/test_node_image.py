"""deploy/image/install.sh into a temporary root: the files, modes and owners a node gets, and a
venv that runs from there with its own compiled .pyc."""
from __future__ import annotations

import filecmp
import glob
import importlib.util
import marshal
import os
import stat
import subprocess
import sys

import pytest

from common.config import load
from tests.referees.tools import referee, run
from tests.support.agent_rig import REPO
from tests.support.wait import wait_for

PREFIX = "/opt/sco-agent"
UNIT = "/etc/systemd/system/sco-agent.service"
SHIPPED = {   # node path -> (repository file, mode)
    UNIT: ("deploy/systemd/sco-agent.service", 0o644),
    "/etc/sco-agent/agent.toml": ("deploy/sco-agent.toml", 0o644),
    "/etc/systemd/logind.conf.d/50-sco-agent.conf": ("deploy/systemd/logind.conf.d/sco-agent.conf", 0o644),
    "/etc/kubernetes/kubelet.conf.d/50-sco-agent-graceful-shutdown.conf":
        ("deploy/kubernetes/kubelet-graceful-shutdown.yaml", 0o644),
    "/usr/share/doc/sco-agent/README.md": ("README.md", 0o644),
    f"{PREFIX}/share/sco-agent/supervisord.conf": ("supervisord.conf", 0o644),
}
DIRS = {"/etc/sco-agent": 0o755, "/etc/sco-agent/trust": 0o755, "/etc/kubernetes/kubelet.conf.d": 0o755}


def unit_value(key: str) -> str:
    with open(os.path.join(REPO, "deploy", "systemd", "sco-agent.service")) as f:
        return next(line.split("=", 1)[1].strip() for line in f if line.startswith(f"{key}="))


def unit_env(name: str) -> str:
    """The value of the unit's ``Environment=NAME=value`` line ("" if it has none)."""
    with open(os.path.join(REPO, "deploy", "systemd", "sco-agent.service")) as f:
        return next((line.split("=", 2)[2].strip() for line in f if line.startswith(f"Environment={name}=")), "")


def test_the_prefix_is_the_units():
    # supervisord through the lean launcher (supervisord_plugins/launch.py, the sco-supervisord script).
    assert unit_value("ExecStart").startswith(f"{PREFIX}/bin/sco-supervisord ")


@pytest.mark.parametrize("path", sorted(SHIPPED))
def test_shipped_files_with_their_modes(node_image, path):
    source, mode = SHIPPED[path]
    st = os.stat(node_image + path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode
    assert filecmp.cmp(node_image + path, os.path.join(REPO, source), shallow=False)


def test_directories_and_an_empty_trust_directory(node_image):
    for path, mode in DIRS.items():
        st = os.stat(node_image + path)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == mode, path
    assert os.listdir(node_image + "/etc/sco-agent/trust") == []   # cloud-init writes the hall's keys


def test_everything_is_root_owned_and_nothing_world_writable(node_image):
    if os.geteuid() != 0:
        pytest.skip("owners are root only when the image build runs as root (it does)")
    for top in ("/etc", PREFIX, "/usr/share/doc/sco-agent"):
        for dirpath, dirnames, filenames in os.walk(node_image + top):
            for name in dirnames + filenames:
                st = os.lstat(os.path.join(dirpath, name))
                assert (st.st_uid, st.st_gid) == (0, 0), os.path.join(dirpath, name)
                if not stat.S_ISLNK(st.st_mode):
                    assert not st.st_mode & stat.S_IWOTH, os.path.join(dirpath, name)


def test_the_unit_is_enabled_as_systemctl_enable_makes_it(node_image):
    link = node_image + "/etc/systemd/system/multi-user.target.wants/sco-agent.service"
    assert os.readlink(link) == UNIT            # WantedBy=multi-user.target
    res = run([referee("systemctl"), f"--root={node_image}", "is-enabled", "sco-agent.service"])
    assert res.stdout.strip() == "enabled", res.stdout + res.stderr


def test_the_installed_config_loads(node_image):
    config = load(node_image + "/etc/sco-agent/agent.toml")
    assert config.contract.trust_dir == "/etc/sco-agent/trust" and config.node.hall == "default"


def test_scripts_name_the_node_path_never_the_build_root(node_image):
    bindir = node_image + PREFIX + "/bin"
    for name in ("supervisord", "sco-supervisord", "supervisorctl", "sco-agentctl", "sco-watcher", "sco-executor",
                 "sco-verifier", "sco-spool", "sco-checkpoint"):
        with open(os.path.join(bindir, name), "rb") as f:
            assert f.readline() == f"#!{PREFIX}/bin/python\n".encode(), name
        assert os.access(os.path.join(bindir, name), os.X_OK)
    res = subprocess.run(["grep", "-rlF", node_image, bindir, node_image + PREFIX + "/pyvenv.cfg"],
                         capture_output=True, text=True, check=False)
    assert res.stdout == "", f"files naming the build root: {res.stdout}"


def test_every_module_has_its_pyc_for_the_units_optimisation_level(node_image):
    level = unit_env("PYTHONOPTIMIZE")   # install.sh reads it from the unit too
    assert level == "2"
    site = glob.glob(os.path.join(node_image + PREFIX, "lib", "python3*", "site-packages"))[0]
    sources = glob.glob(site + "/**/*.py", recursive=True)
    assert len(sources) > 500
    optimization = "" if level == "0" else level
    assert [s for s in sources if not os.path.exists(importlib.util.cache_from_source(s, optimization=optimization))] \
        == []
    # The code objects name the node's path (tracebacks on a node must not show the build root).
    pyc = importlib.util.cache_from_source(site + "/common/config.py")
    with open(pyc, "rb") as f:
        code = marshal.loads(f.read()[16:])
    assert code.co_filename == site.removeprefix(node_image) + "/common/config.py"


def test_the_venv_runs_sco_agentctl_from_the_root_on_its_own_pyc(node_image):
    venv = node_image + PREFIX
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}    # no PYTHONPATH: nothing of the checkout
    # -v: the interpreter says where each module's code came from, and whether it wrote a .pyc.
    res = subprocess.run([venv + "/bin/python", "-v", venv + "/bin/sco-agentctl", "--help"], cwd="/", env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0 and res.stdout.startswith("usage: sco-agentctl"), res.stdout + res.stderr[-2000:]
    loaded = [line.split("'")[1] for line in res.stderr.splitlines()
              if line.startswith("# code object from ") and venv + "/lib/" in line]
    assert any(p.endswith(f"/agentctl/__pycache__/__main__.{sys.implementation.cache_tag}.pyc") for p in loaded), loaded
    assert [p for p in loaded if not p.endswith(".pyc")] == []          # none compiled from source now
    assert [line for line in res.stderr.splitlines() if line.startswith("# wrote ")] == []


def test_the_units_sco_supervisord_runs_supervisor_from_the_venv(node_image):
    """ExecStart's script, run on the installed venv: supervisor's own main behind the lean launcher."""
    venv = node_image + PREFIX
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONOPTIMIZE": unit_env("PYTHONOPTIMIZE")}
    res = subprocess.run([venv + "/bin/python", venv + "/bin/sco-supervisord", "--version"], cwd="/", env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0 and res.stdout.strip() == "4.3.0", res.stdout + res.stderr[-2000:]


WORKERS = ("sco-spool", "sco-verifier", "sco-executor", "sco-watcher")


@pytest.mark.parametrize("worker", WORKERS)
def test_a_started_worker_runs_optimized_on_the_installed_opt2_pyc(node_image, worker, tmp_path):
    """As the unit runs it (PYTHONOPTIMIZE=2, may write bytecode): every module the worker loads comes
    from a valid .opt-2.pyc that install.sh compiled -- the venv's and the standard library's -- and
    none is compiled (-v says, per module, where its code came from and whether a .pyc was written)."""
    from tests.support.agent_rig import write_config

    venv = node_image + PREFIX
    config = str(tmp_path / "agent.toml")
    write_config(config, {"node": {"name": "node-a", "hall": "h1", "scheduler": "none"},
                          "paths": {"runtime_dir": str(tmp_path / "run"), "state_dir": str(tmp_path / "state")},
                          "agent_socket": {"path": str(tmp_path / "run" / "agent.sock")},
                          "relay": {"servers": []}, "metadata": {"provider": "none"},
                          "contract": {"trust_dir": str(tmp_path / "trust"),
                                       "launch_path": str(tmp_path / "launch.json")}})
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONOPTIMIZE": "2", "PYTHONVERBOSE": "1"}
    err = tmp_path / "stderr"
    with open(err, "wb") as f:
        proc = subprocess.Popen([venv + "/bin/python", venv + "/bin/" + worker, "--config", config],
                                cwd="/", env=env, stdout=subprocess.DEVNULL, stderr=f)
    try:
        # Up and through its first loop pass: process.started is logged before the loop.
        wait_for(lambda: '"process.started"' in err.read_text(errors="replace") or proc.poll() is not None,
                 60, f"{worker} started")
        assert proc.poll() is None, err.read_text(errors="replace")[-3000:]
    finally:
        proc.terminate()
        proc.wait(30)
    lines = err.read_text(errors="replace").splitlines()
    loaded = [line.split("'")[1] if "'" in line else line.split()[-1]
              for line in lines if line.startswith("# code object from ")]
    assert len(loaded) > 50, lines[-50:]
    assert any(f"/{worker.removeprefix('sco-')}/__pycache__/" in p for p in loaded), loaded
    assert [p for p in loaded if not p.endswith(".opt-2.pyc")] == []   # no source compiled, no level-0 pyc
    assert [line for line in lines if line.startswith(("# created ", "# wrote ", "# could not write", "# bytecode is stale"))] \
        == []
