"""The verifier's own read of the scheduler: a narrow, read-only client, so "done" is never just
the executor's word (issue 16).

Kubernetes: ``GET /api/v1/nodes/<node>`` (cordoned?) and ``GET /api/v1/pods?fieldSelector=
spec.nodeName=<node>`` (what still counts, by ``common.pod_filters``), with the ``[kubernetes]``
section's read credentials (token_file, or the client certificate) over ``common.http``. Slurm:
``sinfo`` (drained?) and ``squeue`` (jobs still R, CG or S on the node). Nothing here writes.

``Observer`` reads in a daemon thread, about once a second while the verifier wants it (a
notice is open), so a slow server never holds up the verifier's loop; the loop takes the
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
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        pods: list[dict[str, Any]] = []
        cont = ""
        for _ in range(MAX_PAGES):
            path = f"/api/v1/pods?fieldSelector={quote(f'spec.nodeName={self.node}')}&limit=500"
            doc = self._get(path + (f"&continue={quote(cont)}" if cont else ""))
            items = doc.get("items") or []
            pods += [p for p in items if isinstance(p, dict)
                     and (p.get("spec") or {}).get("nodeName") == self.node]
            cont = str((doc.get("metadata") or {}).get("continue") or "")
            if not cont:
                counting = pods_that_count(pods)
                self.skipped = tuple(sorted(pod_key(p) for p in skipped_by_wish(counting)))
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
    """Reads the scheduler in a daemon thread while ``wanted``; ``latest`` is the last result."""

    def __init__(self, make: Callable[[], KubeReader | SlurmReader],
                 clock: Callable[[], float] = time.time) -> None:
        self._make, self._clock = make, clock
        self.wanted = threading.Event()
        self._stop = threading.Event()
        self.latest: Observation | None = None   # replaced whole (an atomic reference swap)
        self._thread: threading.Thread | None = None

    def want(self, on: bool) -> None:
        if on:
            self.wanted.set()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="verifier-read", daemon=True)
                self._thread.start()
        else:
            self.wanted.clear()

    def stop(self) -> None:
        self._stop.set()
        self.wanted.set()

    def _run(self) -> None:
        reader = None
        while not self._stop.is_set():
            self.wanted.wait()
            if self._stop.is_set():
                break
            started = self._clock()
            try:
                if reader is None:
                    reader = self._make()
                cordoned, left = reader.read()
                self.latest = Observation(started, cordoned, left, skipped=getattr(reader, "skipped", ()))
            except (ReadError, OSError, ValueError) as e:
                self.latest = Observation(started, False, None, str(e)[:300])
            self._stop.wait(READ_EVERY_S)
        if reader is not None:
            reader.close()
