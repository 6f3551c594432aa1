"""The product's import graph: no cycle between modules, no package importing one it may not.

Every module of every package setup.cfg ships is read with ``ast`` (nothing is
executed), and each import is resolved to the product module it loads. Imports
inside functions and under ``TYPE_CHECKING`` count too: a lazy import is still a
dependency, and one that only type checkers follow is still a design cycle.
A module imported by a name computed at run time (``importlib.import_module``;
agentctl's subcommands, zmq's and supervisor's own plugins) is not seen.

The table says which packages each package may import. ``common`` is the one
home of what every process shares, so it imports nothing of the others; the
four processes import ``common`` and never each other (they talk over ZeroMQ);
the packages around them (the operator CLI, the supervisord plugins, the
workload client) sit beside or above them.
"""
from __future__ import annotations

import ast
import configparser
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROCESS = frozenset({"common"})
ALLOWED: dict[str, frozenset[str]] = {
    "common": frozenset(),
    "watcher": PROCESS,
    "executor": PROCESS,
    "verifier": PROCESS,
    "spool": PROCESS,
    # supervisord's own extensions: run inside supervisord or beside the four processes.
    "supervisord_plugins": PROCESS,
    # What workloads vendor: standard library only (tests/sco_checkpoint/test_stdlib_only.py).
    "sco_checkpoint": frozenset(),
    # The operator's command reads what the processes write, with their own readers.
    "agentctl": frozenset({"common", "watcher", "verifier", "spool"}),
}

Graph = Mapping[str, Iterable[str]]


def shipped_packages() -> list[str]:
    """Top-level packages in setup.cfg's [options.packages.find] include list."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    names = cfg["options.packages.find"]["include"].split()
    return sorted(n for n in names if "." not in n and "*" not in n)


def product_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of every shipped package."""
    out = {}
    for package in shipped_packages():
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports_of(module: str, path: Path, known: Iterable[str]) -> set[str]:
    """The product modules ``module`` imports: ``from pkg import name`` is pkg.name if that is a module."""
    known = set(known)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {name for name in found if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    modules = product_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: Graph) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each sorted; a self-import too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def upward_imports(graph: Graph, allowed: Mapping[str, Iterable[str]]) -> list[str]:
    """'a.x -> b.y' for every import across packages the table does not allow (or a package not in it)."""
    bad = []
    for module, targets in sorted(graph.items()):
        src = module.split(".")[0]
        for target in sorted(targets):
            dst = target.split(".")[0]
            if dst != src and (src not in allowed or dst not in allowed[src]):
                bad.append(f"{module} -> {target}")
    return bad


# -- the product ------------------------------------------------------------------------

def test_every_shipped_package_has_a_row_in_the_table():
    assert set(shipped_packages()) == set(ALLOWED)


def test_every_folder_of_a_shipped_package_is_a_regular_package():
    """setup.cfg's ``packages = find:`` skips a folder without __init__.py: it would be left out of the wheel."""
    folders = {p.parent for package in shipped_packages() for p in (REPO / package).rglob("*.py")}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").exists()) == []


def test_there_is_no_import_cycle_between_modules():
    assert find_cycles(import_graph()) == []


def test_no_package_imports_one_it_may_not():
    assert upward_imports(import_graph(), ALLOWED) == []


def test_the_graph_is_read_from_the_real_files():
    """The walk finds what is known to be there, so an empty graph cannot pass for a clean one."""
    graph = import_graph()
    assert len(graph) > 60
    assert "common.ipc" in graph["common.runtime"]                      # from common import ipc
    assert "watcher.ed25519_check" in graph["watcher.contract_verify"]
    assert "spool.shipper" in graph["spool.__main__"]                  # under TYPE_CHECKING, and in a function
    assert "agentctl.status" in graph["agentctl.__main__"]              # inside cmd_status


# -- the checks themselves, on small graphs ---------------------------------------------

def test_find_cycles_finds_a_loop_and_nothing_in_a_tree():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
    assert find_cycles({"a": {"a"}}) == [["a"]]
    assert find_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "e"}, "e": set()}) == [["a", "b"], ["c", "d"]]


def test_upward_imports_names_each_edge_the_table_forbids():
    table = {"common": (), "watcher": ("common",), "agentctl": ("common", "watcher")}
    graph = {"common.x": {"watcher.y"}, "watcher.y": {"common.x", "watcher.z"}, "watcher.z": set(),
             "agentctl.m": {"watcher.y", "common.x"}, "newpkg.n": {"common.x"}}
    assert upward_imports(graph, table) == ["common.x -> watcher.y", "newpkg.n -> common.x"]


def test_imports_are_resolved_to_modules(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import os\nfrom pkg import b\nfrom . import c\nfrom .b import thing\n"
                              "def f():\n    from pkg.c import other\n    import pkg\n")
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c"}
    assert imports_of("pkg.a", pkg / "a.py", known) == {"pkg", "pkg.b", "pkg.c"}


@pytest.mark.parametrize("source, expected", [
    ("from common.ipc import send", {"common.ipc"}),
    ("from common import ipc, config", {"common.ipc", "common.config"}),
    ("from common import VERSION", {"common"}),
    ("import zmq, ujson", set()),
])
def test_from_imports_name_the_module_they_load(tmp_path, source, expected):
    (tmp_path / "m.py").write_text(source + "\n")
    assert imports_of("x.m", tmp_path / "m.py", {"common", "common.ipc", "common.config", "x.m"}) == expected
