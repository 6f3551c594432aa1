"""examples/restart_safe_worker.py: checkpointed on notice, killed, restarted, resumes."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from common.timefmt import format_rfc3339, parse_rfc3339
from tests.support.agent_socket import make_notice, wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(REPO, "examples", "restart_safe_worker.py")


class Worker:
    """The example worker as a subprocess, its stdout lines collected by a reader thread."""

    def __init__(self, sock_path: str, state: str, *extra: str) -> None:
        env = dict(os.environ, SCO_AGENT_SOCKET=sock_path, PYTHONPATH=REPO)
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, "--state", state, "--unit-seconds", "0.005", "--log-every", "5", *extra],
            env=env, stdout=subprocess.PIPE, text=True)
        self.lines: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def expect(self, prefix: str, timeout: float = 15.0) -> str:
        """The next stdout line starting with ``prefix`` (others are skipped)."""
        while True:
            line = self.lines.get(timeout=timeout)
            if line.startswith(prefix):
                return line

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stdout.close()


def test_worker_killed_after_its_checkpoint_resumes_where_it_left_off(serve, sock_dir):
    st = serve()
    state = os.path.join(sock_dir, "progress.json")
    first = Worker(st.path, state)
    try:
        assert first.expect("resuming at unit") == "resuming at unit 0"
        first.expect("unit 10 done")  # some work is done before the notice
        wait_until(lambda: st.stats()["registered"] == 1, what="the worker registering")
        st.announce(make_notice("n1"))
        line = first.expect("checkpointed at unit")
        [ack] = wait_until(st.acks, what="the ack")
        assert ack.status == "checkpointed" and ack.name == "restart-safe-worker"
        with open(state) as f:
            saved = json.load(f)["done"]
        assert saved >= 10 and line == f"checkpointed at unit {saved} for notice n1"
    finally:
        first.kill()  # the instance is taken away

    second = Worker(st.path, state)
    try:
        assert second.expect("resuming at unit") == f"resuming at unit {saved}"
        assert int(second.expect("unit ").split()[1]) > saved  # and it carries on from there
    finally:
        second.kill()


def test_a_slow_save_asks_for_more_time_and_gets_what_the_budget_allows(serve, sock_dir):
    """--save-seconds: the worker extends by that much before saving; the agent's answer counts."""
    st = serve()
    worker = Worker(st.path, os.path.join(sock_dir, "progress.json"), "--save-seconds", "0.5")
    try:
        worker.expect("resuming at unit")
        wait_until(lambda: st.stats()["registered"] == 1, what="the worker registering")
        notice = make_notice("n1", checkpoint_in=5)
        notice["extend_limit"] = format_rfc3339(time.time() + 30)
        st.announce(notice)
        line = worker.expect("extended: checkpoint by")
        granted = parse_rfc3339(line.split()[-1])
        assert granted - parse_rfc3339(notice["checkpoint_by"]) == pytest.approx(1.0, abs=0.002)  # 0.5 s, asked as whole seconds
        worker.expect("checkpointed at unit")
        [ack] = wait_until(st.acks, what="the ack")
        assert ack.status == "checkpointed"
    finally:
        worker.kill()
