"""The installed agent runs with -OO (PYTHONOPTIMIZE=2, docs/footprint.md): nothing may depend on
what that strips.

-O removes every ``assert`` statement and -OO every docstring (``__doc__`` is None). So no
product module uses ``assert`` (a check that matters is an explicit ``if ...: raise``), and
none reads a docstring as a string (``__doc__.splitlines()``, ``__doc__ + ...``): passing
``__doc__`` along as a value that may be None (argparse's ``description=``) is fine. Read with
``ast``, nothing executed; tests and benches are not product code.
"""
from __future__ import annotations

import ast

from tests.repo.test_layering import product_modules


def _uses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            found.append((node.lineno, "assert (gone under -O)"))
        elif _reads_doc(node):
            found.append((node.lineno, "__doc__ used as a string (None under -OO)"))
    return found


def _reads_doc(node: ast.AST) -> bool:
    """``__doc__.x``, ``__doc__[i]``, ``__doc__ + s``: what fails when it is None."""
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        return _is_doc(node.value)
    return isinstance(node, ast.BinOp) and (_is_doc(node.left) or _is_doc(node.right))


def _is_doc(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "__doc__") or \
        (isinstance(node, ast.Attribute) and node.attr == "__doc__")


def test_no_product_module_depends_on_assert_or_docstrings():
    bad = [f"{path}:{line}: {what}" for path in product_modules().values()
           for line, what in _uses(ast.parse(path.read_text(), str(path)))]
    assert not bad, "\n".join(bad)


def test_the_check_sees_both():
    tree = ast.parse("def f(x):\n    assert x\n    return f.__doc__.strip() + __doc__\n")
    assert [what.split()[0] for _, what in _uses(tree)] == ["assert", "__doc__", "__doc__"]
