"""Game-day injection: `simulate` writes a payload the watcher accepts exactly like a relay payload."""
from __future__ import annotations

import io
import os
import time

import pytest

from agentctl.simulate import main, parse_duration
from common.notice import Rejected
from tests.support.agent_rig import write_config
from tests.support.wait import wait_for
from watcher.inject import inject_dir, read_injected


@pytest.fixture
def config(tmp_path):
    path = str(tmp_path / "agent.toml")
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    write_config(path, {"node": {"name": "node-a", "instance_id": "i-9"},
                        "paths": {"runtime_dir": str(run_dir), "state_dir": str(tmp_path / "state")}})
    return path, str(run_dir)


def test_durations():
    assert parse_duration("120s") == 120.0
    assert parse_duration("2m") == 120.0
    assert parse_duration("90") == 90.0
    assert parse_duration("500ms") == 0.5
    for bad in ("", "soon", "-5s", "1d"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_simulate_injects_a_notice_the_watcher_accepts(config, capsys):
    path, run_dir = config
    before = time.time()
    assert main(["--config", path, "--kind", "reclaim", "--in", "120s", "--id", "gameday-1"]) == 0
    assert "gameday-1" in capsys.readouterr().out
    (_, notice), = read_injected(inject_dir(run_dir), 8192)
    assert not isinstance(notice, Rejected)
    assert (notice.id, notice.kind, notice.node, notice.instance_id) == ("gameday-1", "reclaim", "node-a", "i-9")
    assert notice.source == "simulate"
    assert before + 119 <= notice.deadline <= time.time() + 121
    assert os.listdir(inject_dir(run_dir)) == []           # read once, then gone


def test_simulate_cancel_needs_an_id(config, capsys):
    path, _ = config
    assert main(["--config", path, "--kind", "cancel"]) == 2
    assert main(["--config", path, "--in", "soon"]) == 2
    assert main(["--config", path, "--id", "../../etc/passwd"]) == 2


def test_simulate_without_a_running_agent_says_so(tmp_path, capsys):
    path = str(tmp_path / "agent.toml")
    write_config(path, {"paths": {"runtime_dir": str(tmp_path / "nope"), "state_dir": str(tmp_path / "s")}})
    assert main(["--config", path]) == 1
    assert "is the agent running" in capsys.readouterr().err


def test_bad_files_are_rejected_like_relay_payloads_and_removed(tmp_path):
    d = tmp_path / "inject"
    d.mkdir()
    (d / "1.json").write_bytes(b"{not json")
    (d / "2.json").write_bytes(b'{"v": 2}')
    (d / "3.json").write_bytes(b"x" * 9000)
    os.symlink("/etc/hostname", d / "4.json")
    (d / "5.json.tmp.77").write_bytes(b"half-written")             # write_atomic's temp file: not ours yet
    results = read_injected(str(d), 8192)
    reasons = {name: r.reason for name, r in results if isinstance(r, Rejected)}
    assert reasons == {"1.json": "bad_json", "2.json": "bad_version", "3.json": "too_large", "4.json": "unreadable"}
    assert sorted(os.listdir(d)) == ["5.json.tmp.77"]


def test_missing_directory_is_nothing_to_do(tmp_path):
    assert read_injected(str(tmp_path / "absent"), 8192) == []


def test_the_watcher_announces_an_injected_notice_on_the_local_channel(config):
    """End to end inside the watcher: file -> NoticeBook -> the announced state, with counters and arrivals."""
    import zmq

    from common import ipc
    from common.config import load
    from common.log import Logger
    from watcher.__main__ import Watcher

    path, run_dir = config
    ctx = zmq.Context()
    try:
        w = Watcher(load(path), Logger("watcher", stream=io.StringIO()), ctx)
        sub = ipc.subscriber(ctx, run_dir, ipc.WATCHER_PUB, ipc.T_NOTICE)
        assert main(["--config", path, "--id", "gd-2", "--in", "2m"]) == 0
        with open(os.path.join(inject_dir(run_dir), "zz-bad.json"), "wb") as f:
            f.write(b"[]")
        w.on_injected()
        assert w.book.active["gd-2"].channel == "local"
        assert w.counters == {"new.local": 1, "rejected.bad_shape": 1}

        def announced():
            # The watcher also announces at once on a change: read up to this announce's message.
            w.announce()
            last = None
            while sub.poll(100):
                last = ipc.decode(sub.recv_multipart())[1]
            return last if last and last["counters"] == w.published_counters() else None
        body = wait_for(announced, 5, "the notice state on watcher.pub")
        assert [n["id"] for n in body["active"]] == ["gd-2"]
        assert set(body["arrivals"]["gd-2"]) == {"local"} and body["counters"]["rejected.bad_shape"] == 1
        assert body["started_at"] == w.started_at
    finally:
        ctx.destroy(linger=0)
