"""Settings anyone could have changed: every agent process refuses to start, exit 2, one clear line.

supervisord treats exit 2 as a failed start and, after its retries, shows the
program FATAL -- a node that says it is misconfigured instead of draining on
settings or keys someone else may have planted.
"""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import ujson

from common import ipc
from tests.support.agent_rig import REPO, write_config
from tests.support.wait import wait_for

PROGRAMS = ("watcher", "executor", "verifier", "spool")


def agent_config(base: Path, **sections: dict) -> Path:
    conf = base / "etc"
    conf.mkdir(mode=0o755, exist_ok=True)
    settings = {"node": {"name": "node-a", "hall": "h1", "scheduler": "none"},
                "paths": {"runtime_dir": str(base / "run"), "state_dir": str(base / "state")},
                "relay": {"servers": []}, "metadata": {"provider": "none"},
                "agent_socket": {"path": str(base / "run" / "agent.sock")},
                "contract": {"trust_dir": str(base / "trust"), "launch_path": str(base / "launch.json")}}
    for name, table in sections.items():
        settings.setdefault(name, {}).update(table)
    path = conf / "agent.toml"
    write_config(str(path), settings)
    os.chmod(path, 0o644)
    return path


def run(module: str, config: Path, timeout: float = 30) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", module, "--config", str(config)], env=env, cwd=REPO, check=False,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def last_record(stderr: str) -> dict:
    lines = [ujson.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert lines, stderr
    return lines[-1]


@pytest.mark.parametrize("module", PROGRAMS)
def test_world_writable_configuration_file(tmp_path, module):
    config = agent_config(tmp_path)
    os.chmod(config, 0o666)
    done = run(module, config)
    assert done.returncode == 2
    rec = last_record(done.stderr)
    assert rec["msg"] == "config.invalid" and "world-writable" in rec["error"] and "chmod o-w" in rec["error"]


def test_configuration_in_a_world_writable_directory(tmp_path):
    """Anyone could replace the file there (no sticky bit): refused like the file itself."""
    config = agent_config(tmp_path)
    os.chmod(config.parent, 0o777)
    done = run("executor", config)
    assert done.returncode == 2 and "world-writable" in last_record(done.stderr)["error"]


@pytest.mark.parametrize("mode", [0o777, 0o1777])
def test_world_writable_trust_directory(tmp_path, mode):
    """Anyone could add a key and sign their own drain budget: the watcher exits 2 and says why."""
    config = agent_config(tmp_path)
    (tmp_path / "trust").mkdir()
    os.chmod(tmp_path / "trust", mode)
    done = run("watcher", config)
    assert done.returncode == 2
    rec = last_record(done.stderr)
    assert rec["msg"] == "contract.trust_dir_unsafe" and "chmod o-w" in rec["error"]


def test_missing_trust_directory_starts_on_the_builtin_contract(tmp_path):
    """No trust directory is not unsafe, only unsigned: the watcher runs, loudly, on BUILTIN."""
    config = agent_config(tmp_path)
    env = dict(os.environ, PYTHONPATH=REPO)
    with open(tmp_path / "watcher.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "watcher", "--config", str(config)], env=env, cwd=REPO,
                                stderr=log, stdin=subprocess.DEVNULL)
    try:
        # relay.disabled comes from the running loop, after the stop signals are handled.
        wait_for(lambda: "relay.disabled" in (tmp_path / "watcher.log").read_text(), 20, "the watcher running")
        assert proc.poll() is None and "contract.builtin" in (tmp_path / "watcher.log").read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


def test_runtime_directory_owned_by_someone_else(tmp_path):
    """Its owner could bind our socket paths first: refused, exit 2."""
    config = agent_config(tmp_path)
    (tmp_path / "run").mkdir(mode=0o700)
    os.chown(tmp_path / "run", 12345, 12345)
    done = run("verifier", config)
    assert done.returncode == 2 and "owned by uid 12345" in last_record(done.stderr)["error"]


def test_runtime_directory_is_created_0700_and_tightened(tmp_path):
    fresh = tmp_path / "fresh"
    ipc.ensure_runtime_dir(str(fresh))
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    ipc.ensure_runtime_dir(str(loose))
    assert stat.S_IMODE(os.stat(loose).st_mode) == 0o700
    (tmp_path / "link").symlink_to(loose)
    with pytest.raises(NotADirectoryError):
        ipc.ensure_runtime_dir(str(tmp_path / "link"))
