"""The verifier's own read of the scheduler: a narrow, read-only client, so "done" is never just
the executor's word (issue 16).

Kubernetes: ``GET /api/v1/nodes/<node>`` (cordoned? which volumes are still attached:
verifier/volumes.py -- the same request, none added) and ``GET /api/v1/pods?fieldSelector=
spec.nodeName=<node>`` (what still counts, by ``common.pod_filters``), with the ``[kubernetes]``
section's read credentials (token_file, or the client certificate) over ``common.http``. Slurm:
``sinfo`` (drained?) and ``squeue`` (jobs still R, CG or S on the node). Nothing here writes.

``Observer`` reads in a daemon thread (supervised: restarted if it dies, common.supervise), about
once a second while the verifier wants it (a notice is open), so a slow server never holds up the
verifier's loop; the loop takes the
latest ``Observation`` into its ``View``. http.client and ssl (about 4 MiB) are imported when the
first read is made, not by an idle verifier; so is subprocess, which only a Slurm read needs.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import ujson

from common.pod_filters import pod_key, pods_that_count
from common.pod_policy import skipped_by_wish
from common.supervise import Crash, Supervised
from verifier import volumes
from verifier.judge import Observation

if TYPE_CHECKING:
    from common.config import Config

READ_EVERY_S = 1.0
MAX_PAGES = 20


class ReadError(Exception):
    """The scheduler could not be read; the text says why (it becomes the verdict's reason)."""


def _token(path: str) -> str:
    if not path or not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read(65536).strip()


def _field(obj: dict[str, Any], key: str, kind: type, what: str) -> Any:
    """``obj[key]`` if it is a ``kind`` (absent or null: an empty one); else the read is refused.

    The server's answer is refused whole, never guessed at: a shape nobody foresaw used to end the
    reading thread (issue 26), and a pod whose shape cannot be read cannot be said to be gone."""
    value = obj.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise ReadError(f"{what}: {key} is a {type(value).__name__}, not a {kind.__name__}")
    return value


def _pod(p: Any) -> dict[str, Any]:
    """A listed pod whose every part the filters read (common.pod_filters) has its shape."""
    if not isinstance(p, dict):
        raise ReadError(f"the pod list: an item is a {type(p).__name__}, not an object")
    for key in ("metadata", "spec", "status"):
        _field(p, key, dict, "a pod")
    md = p.get("metadata") or {}
    _field(md, "annotations", dict, "a pod's metadata")
    if not all(isinstance(ref, dict) for ref in _field(md, "ownerReferences", list, "a pod's metadata")):
        raise ReadError("a pod's metadata: an ownerReference is not an object")
    return p


class KubeReader:
    """GETs only, for one node."""

    def __init__(self, config: Config) -> None:
        from common.http import HttpClient, TlsFiles  # here: an idle verifier does not pay for it

        k = config.kubernetes
        self.node = config.node.name
        self.http = HttpClient(k.api_url, timeout_s=k.timeout_s, max_body=16 << 20,
                               tls=TlsFiles(k.ca_file, k.client_cert_file, k.client_key_file))
        self.token_file = k.token_file
        self.skipped: tuple[str, ...] = ()   # of the last read's pods: those whose own policy is skip
        self.volumes: tuple[str, ...] | None = None   # the last read's attached volumes to wait for

    def _get(self, path: str) -> dict[str, Any]:
        from common.http import HttpError

        headers = {"Accept": "application/json", "User-Agent": "sco-agent-verifier"}
        token = _token(self.token_file)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            resp = self.http.request("GET", path, headers=headers)
        except HttpError as e:
            raise ReadError(f"GET {path.split('?', maxsplit=1)[0]}: {e}") from None
        if resp.status != 200:
            raise ReadError(f"GET {path.split('?', maxsplit=1)[0]}: HTTP {resp.status} {resp.body[:200]!r}")
        try:
            doc = ujson.loads(resp.body)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise ReadError(f"GET {path.split('?', maxsplit=1)[0]}: not a JSON object")
        return doc

    def read(self) -> tuple[bool, tuple[str, ...]]:
        node = self._get(f"/api/v1/nodes/{quote(self.node)}")
        cordoned = bool(_field(node, "spec", dict, "the node").get("unschedulable"))
        try:
            attached, in_use = volumes.names(node)
        except ValueError as e:
            raise ReadError(str(e)) from None
        pods: list[dict[str, Any]] = []
        cont = ""
        for _ in range(MAX_PAGES):
            path = f"/api/v1/pods?fieldSelector={quote(f'spec.nodeName={self.node}')}&limit=500"
            doc = self._get(path + (f"&continue={quote(cont)}" if cont else ""))
            items = _field(doc, "items", list, "the pod list")
            pods += [p for p in items if (_pod(p).get("spec") or {}).get("nodeName") == self.node]
            cont = str(_field(doc, "metadata", dict, "the pod list").get("continue") or "")
            if not cont:
                counting = pods_that_count(pods)
                self.skipped = tuple(sorted(pod_key(p) for p in skipped_by_wish(counting)))
                self.volumes = volumes.to_wait_for(attached, in_use, pods)
                return cordoned, tuple(sorted(pod_key(p) for p in counting))
        raise ReadError(f"more than {MAX_PAGES} pages of pods")

    def close(self) -> None:
        self.http.close()


class SlurmReader:
    """``sinfo`` and ``squeue``, read only, with the agent's SLURM_CONF."""

    def __init__(self, config: Config) -> None:
        self.node = config.node.name
        self.env = dict(os.environ, SLURM_CONF=config.slurm.conf)
        self.timeout_s = config.slurm.command_timeout_s

    def _run(self, *argv: str) -> str:
        # Here, not at the top: only a Slurm node's verifier ever runs a command (from its first read
        # on), and the verifier's import set is measured like the other workers'. subprocess brings
        # selectors, select, locale and _posixsubprocess: +0.16 MiB USS in a verifier started on its
        # own (python -OO, measured); nothing under supervisord's zygote, which preloads it.
        import subprocess

        try:
            proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=self.timeout_s,
                                  check=False)
        except (OSError, subprocess.SubprocessError) as e:
            raise ReadError(f"{argv[0]}: {e}") from None
        if proc.returncode != 0:
            raise ReadError(f"{argv[0]} rc {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}")
        return proc.stdout

    def read(self) -> tuple[bool, tuple[str, ...]]:
        states = [line.split()[1] for line in self._run("sinfo", "-h", "-N", "-o", "%N %T").splitlines()
                  if len(line.split()) == 2 and line.split()[0] == self.node]
        if not states:
            raise ReadError(f"sinfo does not list node {self.node}")
        jobs = self._run("squeue", "-h", "-w", self.node, "-t", "R,CG,S", "-o", "%A").split()
        return "drain" in states[0], tuple(sorted(jobs))

    def close(self) -> None:
        pass


def reader_for(config: Config) -> Callable[[], KubeReader | SlurmReader] | None:
    """How to build the node's reader; None when there is no scheduler to read."""
    if config.node.scheduler == "kubernetes" and config.kubernetes.api_url:
        return lambda: KubeReader(config)
    if config.node.scheduler == "slurm":
        return lambda: SlurmReader(config)
    return None


class Observer:
    """Reads the scheduler in a supervised daemon thread while ``wanted``; ``latest`` is the last result.

    The thread is restarted, after a growing pause, if it ends on an exception it does not expect
    (common.supervise); until its next good read, ``latest`` says the read crashed, so a verdict
    given meanwhile names why it is not "done". ``worker`` is None until the first ``want``."""

    def __init__(self, make: Callable[[], KubeReader | SlurmReader],
                 clock: Callable[[], float] = time.time) -> None:
        self._make, self._clock = make, clock
        self.wanted = threading.Event()
        self.latest: Observation | None = None   # replaced whole (an atomic reference swap)
        self.worker: Supervised | None = None
        self.volumes_seen_at = 0.0   # the last read that found attached volumes to wait for

    def want(self, on: bool) -> None:
        if on:
            self.wanted.set()
            if self.worker is None:
                self.worker = Supervised("verifier-read", self._run, on_crash=self._crashed).start()
        else:
            self.wanted.clear()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        self.wanted.set()

    def _crashed(self, crash: Crash) -> None:
        self.latest = Observation(self._clock(), False, None, f"the verifier's read crashed: {crash.error}")

    def _run(self, stopping: threading.Event) -> None:
        reader = None
        try:
            while not stopping.is_set():
                self.wanted.wait()
                if stopping.is_set():
                    break
                started = self._clock()
                try:
                    if reader is None:
                        reader = self._make()
                    cordoned, left = reader.read()
                    pending = getattr(reader, "volumes", None)   # None: no volumes here (Slurm)
                    if pending:
                        self.volumes_seen_at = started
                    self.latest = Observation(started, cordoned, left, skipped=getattr(reader, "skipped", ()),
                                              volumes=pending, volumes_seen_at=self.volumes_seen_at)
                except (ReadError, OSError, ValueError) as e:
                    self.latest = Observation(started, False, None, str(e)[:300])
                stopping.wait(READ_EVERY_S)
        finally:
            if reader is not None:   # a new one after a restart: nothing of a broken one is kept
                reader.close()
