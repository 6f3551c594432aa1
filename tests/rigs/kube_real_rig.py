"""A real kube-apiserver v1.20.2 on loopback, backed by a private etcd, for end-to-end tests.

The binary comes from tests/rigs/kube_real/build.sh (built once from Debian's source package and
cached outside the repo). This module owns only the processes and their credentials: certificates,
a service-account key, a static token file (an admin in system:masters and one identity per node,
`system:node:<name>` in `system:nodes`), x509 client certificates from the same CA
(`--client-ca-file`; `node_cert`), an audit log of Node patches (`audit`), and kubeconfigs for kubectl. The authorizer is
Node,RBAC with the NodeRestriction admission plugin, as the agent's production setup would be, so
a node identity can cordon and evict on its own node only.

Objects a controller-less 1.20 server needs a hand with live in tests/rigs/kube_real_objects.py.
"""
from __future__ import annotations

import json
import secrets
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import requests
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.rigs.kube_real_objects import KubeClient
from tests.support import pki

DEFAULT_NODES = ("node-a", "node-b")
READY_TIMEOUT_S = 90.0  # ~4 s when idle; generous because the 2 cores are shared
STOP_TIMEOUT_S = 15.0


def free_port() -> int:
    """A loopback port that was free a moment ago (bind port 0, read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, slots=True)
class Identity:
    """One static-token user: what kubectl and the HTTP client present."""

    user: str
    groups: tuple[str, ...]
    token: str
    kubeconfig: Path


def _write_pem(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _make_pki(pki_dir: Path) -> None:
    """A throwaway CA, a serving cert for 127.0.0.1/localhost, and a service-account key pair."""
    pki_dir.mkdir(parents=True, exist_ok=True)

    # RFC 5280's extensions (tests/support/pki.py): Python 3.13 and the agent verify strictly.
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = pki.ca("sco-test-ca", ca_key)
    srv_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    srv_cert = pki.leaf(pki.name("kube-apiserver"), srv_key, ca, (pki.SERVER,),
                        ("localhost", "kubernetes.default.svc", "127.0.0.1"))
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    _write_pem(pki_dir / "ca.crt", ca.cert.public_bytes(serialization.Encoding.PEM))
    _write_pem(pki_dir / "apiserver.crt", srv_cert.public_bytes(serialization.Encoding.PEM))
    _write_pem(pki_dir / "apiserver.key", _key_pem(srv_key))
    _write_pem(pki_dir / "sa.key", _key_pem(sa_key))
    _write_pem(pki_dir / "ca.key", _key_pem(ca_key))   # kept to issue client certificates (issue_client_cert)


def issue_client_cert(pki_dir: Path, name: str, common_name: str,
                      organizations: tuple[str, ...]) -> tuple[Path, Path]:
    """A client certificate from the rig's CA: kube-apiserver's x509 authenticator (--client-ca-file)
    takes the subject's CN as the user name and each O as a group -- for a node identity
    CN=system:node:<name>, O=system:nodes, as the kubelet's own certificate. Returns (cert, key)."""
    ca_key = serialization.load_pem_private_key((pki_dir / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    ca = pki.Issuer(x509.load_pem_x509_certificate((pki_dir / "ca.crt").read_bytes()), ca_key)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = pki.leaf(pki.name(common_name, organizations), key, ca, (pki.CLIENT,))
    return (_write_pem(pki_dir / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            _write_pem(pki_dir / f"{name}.key", _key_pem(key)))


# Node PATCHes with their request bodies, nothing else: enough to see which identity sent what.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [{"level": "Request", "verbs": ["patch"], "resources": [{"group": "", "resources": ["nodes"]}]},
              # The conditions (issue 28): who wrote them, and a pod's mark before its delete.
              {"level": "Request", "verbs": ["patch"],
               "resources": [{"group": "", "resources": ["nodes/status", "pods/status"]}]},
              {"level": "Metadata", "verbs": ["delete"], "resources": [{"group": "", "resources": ["pods"]}]},
              {"level": "None"}],
}


def _kubeconfig(server: str, ca: Path, user: str, token: str) -> str:
    # JSON is valid YAML, and kubectl reads either; no yaml dependency needed.
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sco",
        "clusters": [{"name": "sco", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "sco", "context": {"cluster": "sco", "user": user}}],
    }, indent=2)


class RealApiServer:
    """etcd + kube-apiserver v1.20.2 under `base_dir`; start()/stop() or use as a context manager.

    After start(): `url`, `ca_file`, `admin` and `nodes[name]` (Identity with token and kubeconfig),
    `client()` / `node_client(name)` for HTTP calls. stop() ends exactly the processes it started.
    """

    def __init__(self, base_dir: Path, apiserver_binary: Path, *,
                 etcd_binary: str = "etcd", node_names: tuple[str, ...] = DEFAULT_NODES) -> None:
        self.base_dir = Path(base_dir)
        self.apiserver_binary = Path(apiserver_binary)
        self.etcd_binary = etcd_binary
        self.node_names = node_names
        self.url = ""
        self.ca_file = self.base_dir / "pki" / "ca.crt"
        self.admin: Identity | None = None
        self.nodes: dict[str, Identity] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Self:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        _make_pki(self.base_dir / "pki")
        api_port = free_port()
        self.url = f"https://127.0.0.1:{api_port}"
        self._write_identities()
        try:
            etcd_url = self._start_etcd()
            self._start_apiserver(api_port, etcd_url)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop what start() started, newest first; verify each PID is still ours before signalling."""
        for name in reversed(list(self._procs)):
            proc = self._procs.pop(name)
            if proc.poll() is None and self._is_ours(proc):
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=STOP_TIMEOUT_S)
            (self.base_dir / f"{name}.pid").unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self._procs.items()}

    # -- clients -----------------------------------------------------------------------------
    def client(self) -> KubeClient:
        """A new admin (system:masters) client; one per thread, as requests sessions are not shared."""
        assert self.admin is not None, "server not started"
        return KubeClient(self.url, self.admin.token, self.ca_file)

    def node_client(self, node: str) -> KubeClient:
        return KubeClient(self.url, self.nodes[node].token, self.ca_file)

    def node_cert(self, node: str) -> tuple[Path, Path]:
        """(cert, key) of an x509 node identity for ``node``, issued by the rig's CA."""
        return issue_client_cert(self.base_dir / "pki", f"node-{node}", f"system:node:{node}", ("system:nodes",))

    def audit(self) -> list[dict]:
        """The audit log's events so far (AUDIT_POLICY: every PATCH of a Node, its status or a pod's
        status, with its body; every pod DELETE)."""
        path = self.base_dir / "audit.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    # -- internals ---------------------------------------------------------------------------
    def _write_identities(self) -> None:
        rows = []
        self.admin = self._identity("admin", ("system:masters",), "admin.kubeconfig")
        rows.append(self.admin)
        for node in self.node_names:
            ident = self._identity(f"system:node:{node}", ("system:nodes",), f"node-{node}.kubeconfig")
            self.nodes[node] = ident
            rows.append(ident)
        # Static token file format: token,user,uid,"group1,group2"
        lines = [f'{i.token},{i.user},{i.user},"{",".join(i.groups)}"' for i in rows]
        _write_pem(self.base_dir / "pki" / "tokens.csv", ("\n".join(lines) + "\n").encode())

    def _identity(self, user: str, groups: tuple[str, ...], filename: str) -> Identity:
        token = secrets.token_hex(16)
        path = self.base_dir / filename
        path.write_text(_kubeconfig(self.url, self.ca_file, user, token))
        path.chmod(0o600)
        return Identity(user=user, groups=groups, token=token, kubeconfig=path)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.base_dir / f"{name}.log", "wb")  # noqa: SIM115 -- the child owns it
        with log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.base_dir)
        self._procs[name] = proc
        (self.base_dir / f"{name}.pid").write_text(f"{proc.pid}\n")
        return proc

    def _is_ours(self, proc: subprocess.Popen[bytes]) -> bool:
        try:
            argv0 = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
        except OSError:
            return False
        want = proc.args[0] if isinstance(proc.args, list) else str(proc.args)
        return argv0 == str(want)

    def _start_etcd(self) -> str:
        client_port, peer_port = free_port(), free_port()
        client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        self._spawn("etcd", [
            self.etcd_binary, "--name", "sco-test",
            "--data-dir", str(self.base_dir / "etcd-data"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"sco-test={peer}", "--log-level", "warn", "--logger", "zap",
        ])
        return client

    def _start_apiserver(self, port: int, etcd_url: str) -> None:
        pki_dir = self.base_dir / "pki"
        policy = self.base_dir / "audit-policy.json"
        policy.write_text(json.dumps(AUDIT_POLICY))
        self._spawn("kube-apiserver", [
            str(self.apiserver_binary),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={port}", "--insecure-port=0",
            f"--cert-dir={pki_dir}",
            f"--tls-cert-file={pki_dir / 'apiserver.crt'}", f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
            f"--token-auth-file={pki_dir / 'tokens.csv'}",
            f"--client-ca-file={pki_dir / 'ca.crt'}",   # x509 client certificates: issue_client_cert
            f"--audit-policy-file={policy}", f"--audit-log-path={self.base_dir / 'audit.log'}",
            "--audit-log-mode=blocking",   # an event is on disk before the response: no waiting in tests
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-account-key-file={pki_dir / 'sa.key'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--profiling=false", "--v=1",
        ])

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        assert self.admin is not None
        headers = {"Authorization": f"Bearer {self.admin.token}"}
        last = "no answer yet"
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self._log_tail(name)}")
            try:
                resp = requests.get(f"{self.url}/readyz", headers=headers, verify=str(self.ca_file), timeout=2)
                if resp.status_code == 200:
                    return
                last = f"{resp.status_code} {resp.text[-300:]}"
            except requests.RequestException as exc:
                last = repr(exc)
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver not ready in {READY_TIMEOUT_S:.0f} s ({last}):\n"
                           f"{self._log_tail('kube-apiserver')}")

    def _log_tail(self, name: str, lines: int = 30) -> str:
        path = self.base_dir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

