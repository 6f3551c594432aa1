"""bench.fleet_lease: every node's kubelet renews its Lease on its own, as a real kubelet does (issue 27, point 4)."""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
import ujson

from bench import fleet_lease
from bench.fleet_lease import start_renewers

SLOW = "node-00"
HANG_S = 2.0


class _LeaseApi(BaseHTTPRequestHandler):
    """kube-node-lease as the API server answers a kubelet: GET 404 until created, POST 201, PUT 200;
    every request of ``SLOW`` hangs first (its answer comes after the client gave up)."""
    protocol_version = "HTTP/1.1"
    leases: ClassVar[dict[str, dict[str, Any]]] = {}
    lock = threading.Lock()

    def _answer(self, status: int, doc: Any) -> None:
        body = ujson.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _node(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def do_GET(self) -> None:
        node = self._node()
        if node == SLOW:
            time.sleep(HANG_S)
        with self.lock:
            lease = self.leases.get(node)
        self._answer(200, lease) if lease else self._answer(404, {"kind": "Status", "code": 404})

    def do_POST(self) -> None:
        doc = ujson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.leases[doc["metadata"]["name"]] = doc
        self._answer(201, doc)

    def do_PUT(self) -> None:
        doc = ujson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.leases[self._node()] = doc
        self._answer(200, doc)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def lease_api() -> Iterator[str]:
    _LeaseApi.leases = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LeaseApi)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_node_whose_renewals_hang_delays_no_other_node_s(lease_api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A 0.5 s heartbeat stands for the 10 s one (and is the client's timeout, as RENEW_S is).
    monkeypatch.setattr(fleet_lease, "RENEW_S", 0.5)
    nodes = [f"node-{i:02d}" for i in range(60)]   # more than the 48 threads that used to share them
    halt = threading.Event()
    threads, attempts = start_renewers(lease_api, "", dict.fromkeys(nodes, "t"), halt)
    time.sleep(3.0)
    halt.set()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)
    assert len(threads) == len(nodes)   # a thread a node
    slow = attempts.pop(SLOW)
    assert slow and all(a.status == 0 for a in slow)   # the hung node: no answer within its timeout
    for node, tries in attempts.items():
        ok = [a for a in tries if a.status in (200, 201)]
        # Created, then renewed every 0.5 s (+ up to 4 %) from a phase within the first 0.5 s.
        assert len(ok) >= 3, (node, tries)
        assert all(a.status in (200, 201) for a in tries), (node, tries)
        # Each went out when due: none waited behind the hung node's timeouts (five tries of 0.5 s each).
        assert max(a.late_s for a in tries) < 0.5, (node, tries)


def test_the_next_renewal_is_a_period_after_the_last_one_ended(lease_api: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_lease, "RENEW_S", 0.3)
    halt = threading.Event()
    threads, attempts = start_renewers(lease_api, "", {"node-01": "t"}, halt)
    time.sleep(2.0)
    halt.set()
    threads[0].join(5)
    sent = [a.sent_at for a in attempts["node-01"]]
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert len(gaps) >= 4
    # 0.3 s (+ the kubelet's 0-4 % jitter) after the last one ended: never sooner, so never a burst
    # to catch up after a slow answer; and not much later (a loaded machine's scheduling aside).
    assert all(0.3 <= g < 1.0 for g in gaps), gaps


def test_the_renewers_small_stacks_are_theirs_alone(lease_api: str) -> None:
    """threading.stack_size is the process's: left set, every later thread would get the renewers'
    512 KiB (a thread parsing deeply nested JSON then overflows it on 3.13: a segfault)."""
    before = threading.stack_size()
    halt = threading.Event()
    threads, _ = start_renewers(lease_api, "", {"node-01": "t"}, halt)
    halt.set()
    threads[0].join(5)
    assert threading.stack_size() == before
