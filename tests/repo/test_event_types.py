"""Event types are a closed type (common.events.EventType) that mypy checks at every call site.

A misspelt type on a rare path used to pass every test that did not reach it and raise in
``make_event`` in production, where supervisord restarted the process into the same path (issue
26, point 7). These tests run mypy, with the product's configuration, on one misspelt call per
emitting path and expect each refused; the same calls spelt right must pass (so the harness
itself can fail). An AST scan keeps new emitting signatures from taking a plain ``str`` again.
"""
from __future__ import annotations

import ast
import re
import textwrap

from common.events import EVENT_TYPES, is_event_type
from tests.repo.test_layering import REPO, shipped_packages
from tests.repo.test_type_check import _mypy

# Every path an event type travels to the spool, written with a placeholder for the type.
CALLS = textwrap.dedent('''
    from __future__ import annotations

    from common.events import EventSink, Origin, Outbox, make_event
    from common.recorder import Recorder
    from common.runtime import Rejections, SpoolLink
    from executor.drain import Shell
    from executor.kube.book_records import Emit as BookEmit
    from executor.scheduler import Announce, StepDone
    from spool.store import Store
    from verifier.core import Emit as VerdictEmit


    def calls(link: SpoolLink, box: Outbox, shell: Shell, sink: EventSink, store: Store,
              rejections: Rejections) -> None:
        say = Recorder(rejections._say, 10.0)
        link.emit("TYPE", "n1", {})
        box.add("TYPE")
        make_event("TYPE", Origin("n", "h", "s"), 1)
        shell.emit("TYPE", "n1", {}, 0.0)
        sink("TYPE", data={})
        store.report("TYPE", {})
        StepDone("n1", "cordoned", "TYPE")
        Announce("n1", "TYPE")
        BookEmit("TYPE", {})
        VerdictEmit("TYPE", "n1", {})
        say.record("TYPE", "reason")
''')


def _check(tmp_path, name: str, type_: str):
    path = tmp_path / name
    path.write_text(CALLS.replace("TYPE", type_))
    return path, _mypy("--config-file", str(REPO / "pyproject.toml"), str(path))


def test_a_misspelt_event_type_is_a_type_error_on_every_emitting_path(tmp_path):
    path, out = _check(tmp_path, "typo_calls.py", "drain.cordonned")
    assert out.returncode == 1, out.stdout + out.stderr
    wrong = {int(m.group(1)) for m in re.finditer(rf"{re.escape(path.name)}:(\d+): error: .*\[arg-type\]",
                                                 out.stdout)}
    calls = [i for i, line in enumerate(path.read_text().splitlines(), 1) if "drain.cordonned" in line]
    assert len(calls) == 11
    assert wrong == set(calls), out.stdout


def test_the_same_calls_spelt_right_type_check(tmp_path):
    _, out = _check(tmp_path, "good_calls.py", "drain.cordoned")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_run_time_check_is_the_same_closed_set():
    assert is_event_type("drain.cordoned") and "drain.cordoned" in EVENT_TYPES
    assert not is_event_type("drain.cordonned") and not is_event_type(None) and not is_event_type(["drain.done"])


# Parameters and fields named like an event type that are not one: a provider's own vocabulary.
NOT_OURS = {("watcher/providers/azure.py", "event_type"), ("watcher/providers/gcp.py", "event")}


def test_no_emitting_signature_takes_a_plain_string():
    found = []
    for package in shipped_packages():
        for path in sorted((REPO / package).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            for node in ast.walk(ast.parse(path.read_text())):
                named = [(a.arg, a.annotation) for a in (*node.args.args, *node.args.kwonlyargs)] \
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    named.append((node.target.id, node.annotation))
                for name, ann in named:
                    if name in ("type", "type_", "event", "event_type") and isinstance(ann, ast.Name) \
                            and ann.id == "str" and (rel, name) not in NOT_OURS:
                        found.append(f"{rel}:{ann.lineno} {name}: str")
    assert not found, found
