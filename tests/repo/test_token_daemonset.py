"""deploy/kubernetes/token-daemonset.yaml: the pod can write the token's own directory and nothing of the agent's.

Parsed with PyYAML (the test extra). The agent's default paths (common.config) are what
deploy/sco-agent.toml ships, so they are what a node runs with: the taint token must be read
from inside the one host directory the pod mounts, and every file the agent decides by -- spool,
contract, verdicts, notice state, drain progress, its sockets -- must lie outside it.
"""
from __future__ import annotations

import os

import yaml

from common.config import build
from executor.__main__ import STATE_FILE as PROGRESS_FILE
from spool.ring import SPOOL_FILE
from tests.support.agent_rig import REPO
from verifier.__main__ import STATE_FILE as VERDICTS_FILE
from watcher.__main__ import STATE_FILE as NOTICE_FILE
from watcher.contract_keeper import LKG_FILE

DAEMONSET = os.path.join(REPO, "deploy", "kubernetes", "token-daemonset.yaml")


def daemonset() -> dict:
    with open(DAEMONSET, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    (ds,) = [d for d in docs if d.get("kind") == "DaemonSet"]
    return ds


def inside(path: str, directory: str) -> bool:
    path, directory = os.path.normpath(path), os.path.normpath(directory)
    return os.path.commonpath([path, directory]) == directory


def host_mounts(ds: dict) -> dict[str, tuple[str, bool]]:
    """hostPath -> (mountPath in the container, read-only) for every hostPath a container mounts."""
    spec = ds["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
    out = {}
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            if m["name"] in host:
                out[host[m["name"]]] = (m["mountPath"], bool(m.get("readOnly")))
    return out


def test_the_daemonset_mounts_one_host_directory_and_the_agent_reads_its_token_from_there():
    ds = daemonset()
    mounts = host_mounts(ds)
    assert list(mounts) == ["/var/lib/sco-agent-token"], mounts
    (token_dir, (mount_path, _)), = mounts.items()
    config = build({})
    # The agent's taint credential is the file the pod writes, in that directory.
    assert inside(config.kubernetes.taint_token_file, token_dir)
    script = " ".join(ds["spec"]["template"]["spec"]["containers"][0]["args"])
    assert f"{mount_path}/{os.path.basename(config.kubernetes.taint_token_file)}" in script.replace(";", " ")
    # ... and nothing the agent decides by is there, nor is either directory inside the other.
    sd, rd = config.paths.state_dir, config.paths.runtime_dir
    agent_files = [os.path.join(sd, name) for name in (SPOOL_FILE, LKG_FILE, VERDICTS_FILE, NOTICE_FILE, PROGRESS_FILE)]
    agent_files += [config.contract.launch_path, config.contract.trust_dir, config.agent_socket.path,
                    config.kubernetes.token_file, sd, rd]
    for path in agent_files:
        assert not inside(path, token_dir), path
    for directory in (sd, rd, os.path.dirname(config.contract.trust_dir)):
        assert not inside(token_dir, directory), directory


def test_the_check_would_catch_the_old_mount_of_the_whole_state_dir():
    ds = daemonset()
    volumes = ds["spec"]["template"]["spec"]["volumes"]
    for v in volumes:
        if "hostPath" in v:
            v["hostPath"]["path"] = "/var/lib/sco-agent"
    (token_dir,) = host_mounts(ds)
    assert inside(os.path.join(build({}).paths.state_dir, SPOOL_FILE), token_dir)
