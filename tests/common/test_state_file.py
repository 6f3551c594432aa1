"""common.state_file: a bad or missing state file is a fresh start (logged), a refused save is logged and said."""
from __future__ import annotations

import io
import json
import os

from common import state_file
from common.log import Logger


def logged(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_saved_doc_loads_back(tmp_path):
    log, path = Logger("t", stream=io.StringIO()), str(tmp_path / "s.json")
    assert state_file.save(path, {"a": [1, 2]}, log, mode=0o644)
    assert state_file.load(path, 1000, log) == {"a": [1, 2]}
    assert os.stat(path).st_mode & 0o777 == 0o644


def test_no_file_is_none_and_says_nothing(tmp_path):
    out = io.StringIO()
    assert state_file.load(str(tmp_path / "none.json"), 1000, Logger("t", stream=out)) is None
    assert out.getvalue() == ""


def test_a_file_over_the_limit_or_not_json_is_none_and_logged(tmp_path):
    out = io.StringIO()
    big, bad = tmp_path / "big.json", tmp_path / "bad.json"
    big.write_text(json.dumps({"x": "y" * 100}))
    bad.write_text("{not json")
    log = Logger("t", stream=out)
    assert state_file.load(str(big), 50, log) is None
    assert state_file.load(str(bad), 1000, log) is None
    assert [(r["msg"], r["path"]) for r in logged(out)] == [
        ("state.corrupt", str(big)), ("state.corrupt", str(bad))]


def test_a_refused_save_is_false_and_logged_unless_told_not_to(tmp_path):
    out = io.StringIO()
    log = Logger("t", stream=out)
    path = str(tmp_path / "missing-dir" / "s.json")
    assert state_file.save(path, {"a": 1}, log) is False
    assert state_file.save(path, {"a": 1}, log, report=False) is False
    (line,) = logged(out)
    assert (line["msg"], line["path"]) == ("state.write_failed", path) and line["error"]


def test_a_save_load_would_refuse_is_not_written_and_the_old_file_stays(tmp_path):
    out = io.StringIO()
    log, path = Logger("t", stream=out), str(tmp_path / "s.json")
    assert state_file.save(path, {"a": 1}, log, limit=100)
    assert state_file.save(path, {"a": "x" * 200}, log, limit=100) is False
    assert state_file.load(path, 100, log) == {"a": 1}
    (line,) = logged(out)
    assert (line["msg"], line["limit"]) == ("state.too_large", 100) and line["size"] > 100


def kept(tmp_path, log: Logger) -> state_file.Kept:
    return state_file.Kept(str(tmp_path / "state" / "s.json"), str(tmp_path / "run" / "s.json"), 1000, log)


def test_kept_makes_the_state_dir_and_saves_there(tmp_path):
    (tmp_path / "run").mkdir()
    log = Logger("t", stream=io.StringIO())
    k = kept(tmp_path, log)
    assert k.save({"n": 1}) and k.load() == {"n": 1}
    assert os.stat(tmp_path / "state").st_mode & 0o777 == 0o700
    assert not os.path.exists(k.fallback)


def test_kept_falls_back_while_the_state_dir_refuses_and_the_newer_copy_wins(tmp_path):
    (tmp_path / "run").mkdir()
    out = io.StringIO()
    log = Logger("t", stream=out)
    k = kept(tmp_path, log)
    assert k.save({"n": 1})
    os.rename(k.path, k.path + ".keep")
    os.mkdir(k.path)   # a directory where the file goes: os.replace fails, even for root
    try:
        assert k.save({"n": 2}) is False and k.save({"n": 3}) is False
        assert state_file.load(k.fallback, 1000, log) == {"n": 3}
        assert kept(tmp_path, log).load() == {"n": 3}        # a restarted process reads the fallback
    finally:
        os.rmdir(k.path)
        os.rename(k.path + ".keep", k.path)
    later = kept(tmp_path, log)
    assert later.failing and later.load() == {"n": 3}       # newer than the state dir's {"n": 1}
    assert later.save({"n": 4}) and later.load() == {"n": 4}
    assert not os.path.exists(later.fallback)               # removed at the first good save
    msgs = [r["msg"] for r in logged(out)]
    assert msgs.count("state.write_failed") == 1 and msgs[-1] == "state.write_recovered"


def test_kept_with_neither_copy_is_a_fresh_start(tmp_path):
    assert kept(tmp_path, Logger("t", stream=io.StringIO())).load() is None
