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
