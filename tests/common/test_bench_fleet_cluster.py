"""bench.fleet_cluster's observer: the control plane's turn-arounds the model replays (issue 27, point 6)."""
from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from bench import fleet_cluster
from bench.fleet_cluster import Kubelets, PodCache, _Answer, mean_turns, retry_after_s
from tests.support.wait import wait_for


def _pod(uid: str, ns: str = "ns-0", terminating: bool = False) -> dict[str, Any]:
    md: dict[str, Any] = {"uid": uid, "name": uid, "namespace": ns}
    if terminating:
        md["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    return {"metadata": md, "spec": {"nodeName": "n-0"}}


def test_the_kubelet_turn_runs_from_the_deletion_seen_to_the_pod_gone_and_each_namespace_says_since_when():
    cache = PodCache()
    cache.reset([_pod("a"), _pod("b"), _pod("c", "ns-1")])
    cache.apply({"type": "MODIFIED", "object": _pod("a", terminating=True)}, 0.0)
    cache.apply({"type": "MODIFIED", "object": _pod("a", terminating=True)}, 0.0)   # seen once, from the first
    cache.apply({"type": "DELETED", "object": _pod("a")}, 0.0)
    cache.apply({"type": "DELETED", "object": _pod("b")}, 0.0)                      # never seen terminating
    assert cache.kubelet_turns.n == 1 and cache.kubelet_turns.total_s >= 0.0
    since = cache.take_gone_since(["ns-0", "ns-1"])
    assert list(since) == ["ns-0"]                 # ns-1 lost no pod
    assert cache.take_gone_since(["ns-0"]) == {}   # taken: the next PDB write answers a newer loss


def test_a_scenario_s_mean_turns_are_the_difference_of_two_readings():
    assert mean_turns((2, 1.0, 4, 2.0), (6, 3.0, 4, 2.0)) == {"kubelet_s": 0.5, "controller_s": None}


# -- the kubelets: one per node ---------------------------------------------------------------------
class _Ident:
    token = "t"


class _Server:
    def __init__(self) -> None:
        self.nodes = {"a": _Ident(), "b": _Ident()}


class _Recorder:
    """A kubelet's client: answers each DELETE from ``answers`` (then 200), after ``hold_s``."""

    def __init__(self, node: str, log: list[tuple[str, str, float, float]], lock: threading.Lock,
                 answers: list[int] | None = None, hold_s: float = 0.05) -> None:
        self.node, self.log, self.lock, self.answers, self.hold_s = node, log, lock, answers or [], hold_s

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> _Answer:
        start = time.monotonic()
        time.sleep(self.hold_s)
        with self.lock:
            self.log.append((self.node, path.rsplit("/", 1)[1], start, time.monotonic()))
            status = self.answers.pop(0) if self.answers else 200
        return _Answer(status, b"", {"retry-after": "0"})


def _kubelets(answers: dict[str, list[int]] | None = None) -> tuple[Kubelets, list[tuple[str, str, float, float]], list[str]]:
    log: list[tuple[str, str, float, float]] = []
    errors: list[str] = []
    lock = threading.Lock()
    kubelets = Kubelets(_Server(), lambda: None, errors, threading.Event())   # type: ignore[arg-type]
    clients = {n: _Recorder(n, log, lock, (answers or {}).get(n)) for n in ('a', 'b')}
    kubelets._client = clients.__getitem__   # type: ignore[assignment,method-assign]
    return kubelets, log, errors


def _terminating_pod(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"uid": name, "name": name, "namespace": "ns-0", "deletionTimestamp": "x"},
            "spec": {"nodeName": node}}


def test_each_node_s_kubelet_deletes_its_pods_one_at_a_time_beside_the_other_nodes() -> None:
    kubelets, log, errors = _kubelets()
    pods = [_terminating_pod(f"{n}{i}", n) for n in ("a", "b") for i in range(4)]
    kubelets.submit(pods)
    kubelets.submit(pods)                         # seen again on the watch: still one DELETE each
    wait_for(lambda: len(log) >= 8, timeout=10, what="8 DELETEs")
    time.sleep(0.2)
    kubelets.shutdown()
    assert sorted(name for _, name, _, _ in log) == sorted(p["metadata"]["name"] for p in pods)
    for node in ("a", "b"):
        spans = sorted((s, e) for n, _, s, e in log if n == node)
        assert all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(spans)), f"{node}'s kubelet ran two at once"
    a = [(s, e) for n, _, s, e in log if n == "a"]
    b = [(s, e) for n, _, s, e in log if n == "b"]
    assert any(sa < eb and sb < ea for sa, ea in a for sb, eb in b), "the nodes' kubelets never ran side by side"
    assert errors == []


def test_a_kubelet_tries_again_after_a_throttle_or_no_answer_and_says_what_it_cannot_do(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_cluster, "KUBELET_RETRY_S", 0.01)
    kubelets, log, errors = _kubelets({"a": [429, 0, 503], "b": [403]})
    kubelets.submit([_terminating_pod("a0", "a"), _terminating_pod("b0", "b"), _terminating_pod("b1", "b")])
    wait_for(lambda: len(log) >= 6, timeout=10, what="a0 four times, b0 and b1 once each")
    time.sleep(0.2)
    kubelets.shutdown()
    assert [name for n, name, _, _ in log if n == "a"] == ["a0"] * 4       # 429, no answer, 503, then done
    assert [name for n, name, _, _ in log if n == "b"] == ["b0", "b1"]     # a refusal is not retried
    assert len(errors) == 1 and "b0" in errors[0] and "403" in errors[0]


@pytest.mark.parametrize(("value", "seconds"), [("3", 3.0), ("0", 0.0), (None, 0.0), ("soon", 0.0), ("-2", 0.0)])
def test_retry_after_reads_seconds_and_nothing_else(value: str | None, seconds: float) -> None:
    assert retry_after_s({} if value is None else {"retry-after": value}) == seconds


def test_a_kubelet_whose_delete_raises_says_so_and_goes_on_with_its_node_s_next_pods() -> None:
    kubelets, log, errors = _kubelets()
    real = kubelets._client

    class _Broken:
        def request(self, *_: Any, **__: Any) -> _Answer:
            raise ValueError("a body the client could not read")

    calls = {"n": 0}

    def client(node: str) -> Any:
        calls["n"] += 1
        return _Broken() if calls["n"] == 1 else real(node)
    kubelets._client = client   # type: ignore[assignment,method-assign]
    kubelets.submit([_terminating_pod("a0", "a"), _terminating_pod("a1", "a")])
    wait_for(lambda: len(log) >= 1, timeout=10, what="a1's DELETE after a0's raised")
    kubelets.shutdown()
    assert [name for _, name, _, _ in log] == ["a1"]
    assert len(errors) == 1 and "ValueError" in errors[0]
