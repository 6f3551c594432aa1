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


def test_the_prefix_is_the_units():
    assert unit_value("ExecStart").startswith(f"{PREFIX}/bin/supervisord ")


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
    for name in ("supervisord", "supervisorctl", "sco-agentctl", "sco-watcher", "sco-executor",
                 "sco-verifier", "sco-spool", "sco-checkpoint"):
        with open(os.path.join(bindir, name), "rb") as f:
            assert f.readline() == f"#!{PREFIX}/bin/python\n".encode(), name
        assert os.access(os.path.join(bindir, name), os.X_OK)
    res = subprocess.run(["grep", "-rlF", node_image, bindir, node_image + PREFIX + "/pyvenv.cfg"],
                         capture_output=True, text=True, check=False)
    assert res.stdout == "", f"files naming the build root: {res.stdout}"


def test_every_module_has_its_pyc_for_the_units_optimisation_level(node_image):
    level = "0"   # the unit sets no PYTHONOPTIMIZE (README: Footprint); install.sh reads it from the unit
    with open(os.path.join(REPO, "deploy", "systemd", "sco-agent.service")) as f:
        assert "PYTHONOPTIMIZE" not in f.read()
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
