"""Getting a real kube-apiserver for a test: build-or-reuse the binary, then start the rig.

A test module defines its own fixture on top of `real_apiserver()`:

    @pytest.fixture(scope="module")
    def kube(tmp_path_factory):
        with real_apiserver(tmp_path_factory.mktemp("kube")) as server:
            yield server

Skips (with the reason) only on a developer's machine where building is impossible: the kubernetes
source package cannot be fetched from its apt sources, or there is no apt-get / no root to install
the toolchain and the binary is not cached yet. Under CI the same is a failure (tests/support/ci.py). Any
other failure -- a broken build, a server that does not come up -- fails the test loudly.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.rigs.kube_real_rig import DEFAULT_NODES, RealApiServer
from tests.support.ci import require

BUILD_SCRIPT = Path(__file__).with_name("kube_real") / "build.sh"
BUILD_TIMEOUT_S = 40 * 60  # ~4 min on 2 idle cores; the cores are often shared
EXIT_SOURCE_UNAVAILABLE = 3  # build.sh's "cannot fetch the source package here"


def cached_binary() -> Path:
    cache = Path(os.environ.get("SCO_CACHE") or Path.home() / ".cache" / "sco-agent")
    return cache / "kube-apiserver-v1.20.2"


def ensure_binary() -> Path:
    """Path of the kube-apiserver binary, building it first if needed (see build.sh)."""
    cached = cached_binary()
    can_build = shutil.which("apt-get") is not None and os.geteuid() == 0
    require((cached.exists() and shutil.which("etcd")) or can_build,
            f"real kube-apiserver not cached, and building it needs root and apt-get (run {BUILD_SCRIPT} as root)")
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S, check=False)
    require(proc.returncode != EXIT_SOURCE_UNAVAILABLE,
            f"kubernetes source package unavailable from this machine's apt sources:\n{proc.stderr[-800:]}")
    if proc.returncode != 0:
        pytest.fail(f"{BUILD_SCRIPT} failed with {proc.returncode}:\n{proc.stderr[-3000:]}", pytrace=False)
    return Path(proc.stdout.strip().splitlines()[-1])


@contextmanager
def real_apiserver(base_dir: Path, node_names: tuple[str, ...] = DEFAULT_NODES) -> Iterator[RealApiServer]:
    """A started RealApiServer under `base_dir`, stopped (its own PIDs only) on exit."""
    with RealApiServer(base_dir, ensure_binary(), node_names=node_names) as server:
        yield server


@contextmanager
def agent_cluster(base_dir: Path, node_names: tuple[str, ...]) -> Iterator[RealApiServer]:
    """A started server with ``node_names`` as Nodes, kube-system, and deploy/kubernetes/rbac.yaml
    applied with the real kubectl: the cluster the agent's own credentials expect."""
    from tests.emulators.kube_fixture import kubectl
    from tests.rigs.kube_real_objects import create_node, ensure_namespace

    repo = Path(__file__).resolve().parents[2]
    with real_apiserver(base_dir, node_names=node_names) as server:
        admin = server.client()
        for node in node_names:
            create_node(admin, node)
        ensure_namespace(admin, "kube-system")
        admin.close()
        assert server.admin is not None
        applied = kubectl(server.admin.kubeconfig, base_dir / "kcache", "apply", "-f",
                          str(repo / "deploy/kubernetes/rbac.yaml"), timeout=120)
        assert applied.returncode == 0, applied.stderr
        yield server


def sa_token(server: RealApiServer, namespace: str = "sco-system", name: str = "sco-agent") -> str:
    """A TokenRequest token of a service account (1.20 cannot bind it to a Node)."""
    admin = server.client()
    try:
        doc = admin.must("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    finally:
        admin.close()
    return str(doc["status"]["token"])
