"""One thread serves a drain's watches and evictions (executor.kube.drain_io), against the emulator.

Issue 27, point 3: a drain used to be a coordinator, a thread per watch (the node's pods, each
namespace's PDBs) and up to 8 eviction workers. Now its threads stay at ``runner.THREADS``
however many PDBs, namespaces and pods; and a watch that dies of something nobody foresaw is
said (``agent.thread_restarted``) and lists afresh, never a silent end (common/supervise.py).
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from common.config import build
from executor.kube import runner
from executor.kube.api import KubeApi
from executor.kube.drain_io import DrainIO
from executor.kube.pod_view import PodView
from executor.kube.scheduler import KubeScheduler
from executor.scheduler import Announce, NewState
from tests.emulators.kube import objects
from tests.executor.kube.harness import NODE, Drain, make_spec
from tests.executor.kube.test_many_notices_kube import order

NAMESPACES = 3
PDBS = 6
PODS = 36


def fill(kube) -> None:
    spaces = [f"team-{k}" for k in range(NAMESPACES)]
    manifests = [objects.namespace(ns) for ns in spaces]
    manifests += [objects.pdb(f"web-{j}", {"app": f"web-{j}"}, namespace=spaces[j % NAMESPACES],
                              max_unavailable="100%") for j in range(PDBS)]
    manifests += [objects.pod(f"p-{i:02d}", NODE, namespace=spaces[(i % PDBS) % NAMESPACES],
                              labels={"app": f"web-{i % PDBS}"}) for i in range(PODS)]
    manifests += [objects.pod(f"solo-{i}", NODE) for i in range(8)]   # no PDB: all 8 may go at once
    kube.seed(*manifests)


def start(kube, drains, **kw) -> Drain:
    d = Drain(lambda: KubeApi(kube.url, NODE, timeout_s=5.0), make_spec(**kw))
    drains.append(d)
    return d


def test_a_drain_of_many_pods_under_many_pdbs_in_many_namespaces_is_one_thread(kube, drains):
    """Six PDB lanes and eight pods under none, each eviction answered 0.3 s late, so that many are
    in flight at once: on the former structure that was 2 + 3 watches + 8 workers = 13 threads."""
    fill(kube)
    kube.fault("delay", pattern="/eviction", seconds=0.3)
    before = {t.ident for t in threading.enumerate()}
    d = start(kube, drains)
    most = 0
    while d.state() is None:
        most = max(most, sum(1 for t in threading.enumerate() if t.ident not in before and t.is_alive()))
        time.sleep(0.01)
    d.wait_state("done", 60)
    assert kube.pod_names(NODE) == set()
    assert most == runner.THREADS == 1
    # Many at once all the same: the six lanes and the eight lone pods went together.
    times = sorted(e["time"] for e in kube.requests() if e["path"].endswith("/eviction"))
    assert len(times) == PODS + 8
    assert times[7] - times[0] < 0.3   # as many as the workers (8)


def test_a_watch_that_dies_of_an_unexpected_exception_is_said_and_lists_afresh(kube, drains, monkeypatch):
    """A watch event the view cannot apply (a bug, a shape nobody foresaw): that watch alone starts
    again after a pause, listing afresh; the drain says so (``agent.thread_restarted``) and ends."""
    for i in range(6):
        kube.add_pod(f"app-{i}", NODE)
    original = PodView.apply
    crashed = []

    def apply(view: PodView, event: dict) -> str:
        if event.get("type") == "DELETED" and not crashed:
            crashed.append(event)
            raise RuntimeError("a bug in the view")
        return original(view, event)
    monkeypatch.setattr(PodView, "apply", apply)
    d = start(kube, drains)
    d.wait_state("done", 30)
    said = [r.data for r in d.reports if isinstance(r, Announce) and r.event == "agent.thread_restarted"]
    assert len(said) == 1 and said[0]["thread"].endswith("/watch-pods")
    assert said[0]["error"] == "RuntimeError: a bug in the view" and said[0]["restarts"] == 1
    assert said[0]["pause_s"] == pytest.approx(0.5)
    lists = [e for e in kube.requests("/api/v1/pods") if "watch" not in e["query"]
             and e["query"].get("resourceVersion") == "0"]
    assert len(lists) == 2   # the first list, and the one after the crash
    assert kube.pod_names(NODE) == set()


def test_a_drain_loop_that_dies_is_said_restarted_by_the_scheduler_and_its_sockets_closed(kube, monkeypatch):
    """The loop itself raising (a bug in the drain's thread): the runner ends saying why, its
    sockets and pipe are closed, and the scheduler starts it again (issue 26's supervision of
    runners), which finishes the drain -- never a thread that died in silence."""
    for i in range(6):
        kube.add_pod(f"app-{i}", NODE)
    original, polls = DrainIO.poll, []

    def poll(self: DrainIO, timeout_s: float) -> Any:
        polls.append(timeout_s)
        if len(polls) == 2:
            raise RuntimeError("a bug in the loop")
        return original(self, timeout_s)
    monkeypatch.setattr(DrainIO, "poll", poll)
    fds_before = len(os.listdir("/proc/self/fd"))
    config = build({"node": {"name": NODE, "scheduler": "kubernetes"}, "kubernetes": {"api_url": kube.url}})
    sched = KubeScheduler(config, lambda: KubeApi(kube.url, NODE, timeout_s=5.0))
    reports: list[Any] = []
    try:
        deadline = time.monotonic() + 30
        while not any(isinstance(r, NewState) for r in reports) and time.monotonic() < deadline:
            sched.advance(order("n1", "reclaim", 120), time.time())
            reports += sched.reports()
            time.sleep(0.02)
    finally:
        sched.close()
    assert [r.state for r in reports if isinstance(r, NewState)] == ["done"]
    said = [r.data for r in reports if isinstance(r, Announce) and r.event == "agent.thread_restarted"]
    assert len(said) == 1 and said[0]["error"] == "RuntimeError: a bug in the loop"
    assert kube.pod_names(NODE) == set()
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 2   # nothing of the first runner left open
