"""The Verifier class in-process, on real ipc sockets: garbage is counted, state is persisted before it is sent."""
from __future__ import annotations

import io
import os
import time
from types import SimpleNamespace

import pytest
import ujson
import zmq

from common import ipc, state_file
from common.config import load
from common.log import Logger
from common.notice import notice_from_dict
from tests.support.agent_rig import write_config
from tests.support.drain_records import budget, record
from tests.support.notices import notice_dict
from tests.support.wait import wait_for
from verifier.__main__ import Verifier
from verifier.judge import Observation

BUDGET = budget(checkpoint_s=1, evict_s=1, margin_s=1)


@pytest.fixture
def shell(tmp_path):
    run_dir = str(tmp_path / "run")
    ipc.ensure_runtime_dir(run_dir)
    path = str(tmp_path / "agent.toml")
    write_config(path, {"node": {"name": "node-a", "scheduler": "slurm"},
                        "paths": {"runtime_dir": run_dir, "state_dir": str(tmp_path / "state")},
                        "metrics": {"textfile": str(tmp_path / "no-such-dir" / "m.prom")}})
    ctx = zmq.Context()
    wpub = ipc.bind(ctx, zmq.PUB, run_dir, ipc.WATCHER_PUB)
    out = io.StringIO()
    v = Verifier(load(path), Logger("verifier", stream=out), ctx)
    yield v, wpub, out
    ctx.destroy(linger=0)


def deliver(v: Verifier, wpub: zmq.Socket, frames: list[bytes], until) -> None:
    """PUB drops messages until the subscription is up: resend until the verifier shows it got one."""
    def sent_and_seen():
        wpub.send_multipart(frames)
        if v.notices_sub.poll(50):
            v.on_readable(v.notices_sub)
        return until()
    wait_for(sent_and_seen, 5, "the verifier to take the message")


def test_garbage_is_counted_and_a_good_message_still_lands(shell):
    v, wpub, out = shell
    for frames in ([b"notice", b"[1]"], [b"notice", b'{"active": 5}'], [b"notice", b'{"active": [], "withdrawn": 3}'],
                   [b"notice", b'{"active": [{"id": "x"}, 7]}']):
        before = v.bad_messages
        deliver(v, wpub, frames, lambda before=before: v.bad_messages > before)
    good = ipc.encode(ipc.T_NOTICE, {"active": [notice_dict("n1", deadline=time.time() + 60)], "withdrawn": [],
                                     "arrivals": {"n1": {"relay": 1.0, "carrier-pigeon": 2.0}}})
    deliver(v, wpub, good, lambda: "n1" in v.active)
    assert v.arrivals == {"n1": {"relay": 1.0}}
    assert "ipc.rejected" in out.getvalue()


def test_judged_state_is_on_disk_before_anything_is_sent(shell, monkeypatch):
    """The verdict is persisted first; the send sees it already in the file."""
    v, wpub, _ = shell
    now = time.time()
    v.active = {}
    deliver(v, wpub, ipc.encode(ipc.T_NOTICE, {"active": [notice_dict("n1", deadline=now + 3)], "withdrawn": []}),
            lambda: "n1" in v.active)
    v.heard |= {ipc.T_CONTRACT, ipc.T_PROGRESS}
    n = v.active["n1"]
    v.progress, v.progress_at = {"n1": record(n, budget=BUDGET, steps={"cordoned": now}, remaining=["job/7"])}, now + 10
    on_disk_at_send = []
    real_send = ipc.send

    def spy(sock, topic, body, refused=None):
        if topic == ipc.T_EVENT and body["type"] == "drain.overrun":
            with open(v.state_path, "rb") as f:
                on_disk_at_send.append(ujson.loads(f.read())["verdicts"]["n1"]["outcome"])
        return real_send(sock, topic, body, refused)
    monkeypatch.setattr(ipc, "send", spy)
    v.check(now + 1)
    v.check(now + 10)
    assert on_disk_at_send == ["overrun"]
    assert v.state["verdicts"]["n1"].held_up_by == "requeue"          # Slurm moves work by requeue


def test_unwritable_metrics_file_is_reported_once(shell):
    v, _, out = shell
    v.write_metrics()
    v.metrics_dirty = True
    v.write_metrics()
    assert out.getvalue().count("metrics.write_failed") == 1
    assert not os.path.exists(v.metrics_path)


def test_damaged_state_file_does_not_stop_the_verifier(tmp_path):
    """Unusable entries are dropped at start; the rest (a verdict, a pending event) is kept."""
    run_dir, state_dir = str(tmp_path / "run"), tmp_path / "state"
    ipc.ensure_runtime_dir(run_dir)
    state_dir.mkdir()
    good = {"event_id": "e1", "type": "drain.done", "notice_id": "n0", "data": {}}
    (state_dir / "verdicts.json").write_text(ujson.dumps({
        "verdicts": {"n0": {"outcome": "done", "at": "yesterday"}, "n1": 5},
        "clocks": {"n2": {"cutoff": "soon"}}, "unacked": {"e1": good, "e2": {"no": "id"}, "e3": []}}))
    path = str(tmp_path / "agent.toml")
    write_config(path, {"paths": {"runtime_dir": run_dir, "state_dir": str(state_dir)}})
    ctx = zmq.Context()
    try:
        v = Verifier(load(path), Logger("verifier", stream=io.StringIO()), ctx)
        assert list(v.state["verdicts"]) == ["n0"] and v.state["clocks"] == {}
        assert v.state["verdicts"]["n0"].outcome == "done" and v.state["verdicts"]["n0"].at == 0.0
        assert list(v.state["unacked"]) == ["e1"] and "e1" in v.spool.outbox.pending
        # Both damaged verdicts are counted; the first is said at once (the second at the next window).
        assert v.rejections.counts == {"ipc.rejected.bad_shape": 2}
        (said,) = [ev for _, ev in v.spool.outbox.pending.values() if ev["type"] == "ipc.rejected"]
        assert said["data"]["socket"] == "verdicts.json" and "'n0'" in said["data"]["detail"]
        v.publish()   # a verdict with an unreadable time still goes out
    finally:
        ctx.destroy(linger=0)


def test_a_verdict_given_while_the_disk_is_full_is_not_given_again_after_a_restart(tmp_path, monkeypatch):
    """Found by the chaos run: the state dir refused the write (ENOSPC), the verdict went out anyway,
    the verifier was killed, and its successor -- reading the old state file -- judged the notice
    again (a second drain.done). The state now falls back to the runtime dir, and the newer copy wins."""
    import errno


    run_dir, state_dir = str(tmp_path / "run"), str(tmp_path / "state")
    ipc.ensure_runtime_dir(run_dir)
    path = str(tmp_path / "agent.toml")
    write_config(path, {"node": {"name": "node-a"}, "paths": {"runtime_dir": run_dir, "state_dir": state_dir}})
    real_write = state_file.write_atomic   # what the verifier saves with

    def full_disk(target, data, *a, **kw):
        if target.startswith(state_dir):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(target, data, *a, **kw)

    now = time.time()
    notice = notice_dict("n1", deadline=now + 30)

    def judge(v: Verifier, at: float) -> list[str]:
        sent = []
        monkeypatch.setattr(ipc, "send", lambda sock, topic, body, refused=None: sent.append(body.get("type")) or True)
        v.active = {"n1": notice_from_dict(notice)}
        v.heard |= {ipc.T_NOTICE, ipc.T_CONTRACT, ipc.T_PROGRESS}
        v.progress, v.progress_at = {"n1": record(v.active["n1"], budget=BUDGET, remaining=[],
                                                  steps={"cordoned": now, "node_empty": now})}, at
        # Its own read of the node agrees (verifier/scheduler_read.py; here without a server).
        v.observer = SimpleNamespace(latest=Observation(at, True, ()), want=lambda on: None)
        v.check(at)
        monkeypatch.undo()
        return [t for t in sent if t in ("drain.done", "drain.overrun")]

    ctx = zmq.Context()
    try:
        Verifier(load(path), Logger("verifier", stream=io.StringIO()), ctx)._save()   # an older good state
        first = Verifier(load(path), Logger("verifier", stream=io.StringIO()), ctx)
        monkeypatch.setattr(state_file, "write_atomic", full_disk)
        assert judge(first, now + 1) == ["drain.done"]
        monkeypatch.undo()
        # SIGKILL here, the disk still full: the next verifier must know the verdict.
        monkeypatch.setattr(state_file, "write_atomic", full_disk)
        second = Verifier(load(path), Logger("verifier", stream=io.StringIO()), ctx)
        assert second.state["verdicts"]["n1"].outcome == "done"
        assert judge(second, now + 2) == []
        monkeypatch.undo()
        # The disk is back: the next save goes to the state dir and the fallback copy is removed.
        out = io.StringIO()
        third = Verifier(load(path), Logger("verifier", stream=out), ctx)
        assert judge(third, now + 3) == [] and third.state["verdicts"]["n1"].outcome == "done"
        third._save()
        assert not os.path.exists(third.fallback_path) and "state.write_recovered" in out.getvalue()
        fourth = Verifier(load(path), Logger("verifier", stream=io.StringIO()), ctx)
        assert fourth.state["verdicts"]["n1"].outcome == "done"
    finally:
        ctx.destroy(linger=0)
