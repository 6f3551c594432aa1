"""The contract with the whole agent: refreshed from its URL without a restart, while a drain
already running keeps the budget it started with."""
from __future__ import annotations

import http.server
import os
import threading

import ujson

from tests.support.stack import NODE, Stack
from tests.support.wait import wait_for

FIRST = {"budget_s": 60, "checkpoint_s": 7, "evict_s": 30, "margin_s": 5}
SECOND = {"budget_s": 90, "checkpoint_s": 11, "evict_s": 50, "margin_s": 9}


class BundleServer:
    """Serves whatever bundle bytes it holds (404 while it holds none), with an ETag."""

    def __init__(self) -> None:
        self.body: bytes | None = None
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = server.body
                if body is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                etag = f'"{hash(body) & 0xFFFFFFFF:x}"'
                if self.headers.get("If-None-Match") == etag:
                    self.send_response(304)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/bundle.json"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_new_contract_lands_without_restart_and_a_running_drain_keeps_its_budget(tmp_path):
    bundles = BundleServer()
    try:
        with Stack(str(tmp_path), contract=FIRST,
                   settings={"contract": {"url": bundles.url, "refresh_s": 1.0}}) as s:
            state = os.path.join(s.agent.state_dir, "executor.json")
            s.kube.add_pod("web-0", NODE, owner=("ReplicaSet", "web"), terminate_after="never")
            first = s.publish_notice(deadline_in=80)
            s.wait_event("drain.started", first["id"])
            executor_pid = s.agent.pid("executor")

            def record(nid: str) -> dict | None:
                with open(state, "rb") as f:
                    return ujson.loads(f.read()).get(nid)

            rec = wait_for(lambda: record(first["id"]), 10, "the first drain's record")
            assert rec["contract_serial"] == 1 and rec["budget"] == FIRST

            # The control plane publishes serial 2; the watcher fetches it within a refresh.
            with open(s.sign_bundle(SECOND, 2, str(tmp_path / "serial2.json")), "rb") as f:
                bundles.body = f.read()
            wait_for(lambda: any(e["data"].get("serial") == 2 for e in s.events_of("contract.accepted")),
                     30, "contract serial 2 accepted")
            status_path = os.path.join(s.agent.run_dir, "contract.json")

            def status_serial() -> int:
                with open(status_path, "rb") as f:
                    return ujson.loads(f.read())["contract"]["serial"]

            wait_for(lambda: status_serial() == 2, 10, "status file on serial 2")
            lkg = os.path.join(s.agent.state_dir, "contract-lkg.json")
            assert os.path.exists(lkg) and os.stat(lkg).st_mode & 0o777 == 0o600

            # The drain already running keeps serial 1's budget; a new notice gets serial 2's.
            second = s.publish_notice(deadline_in=100)
            rec2 = wait_for(lambda: record(second["id"]), 20, "the second drain's record")
            assert rec2["contract_serial"] == 2 and rec2["budget"] == SECOND
            rec = record(first["id"])
            assert rec["contract_serial"] == 1 and rec["budget"] == FIRST
            assert s.agent.pid("executor") == executor_pid   # no restart was needed
    finally:
        bundles.close()
