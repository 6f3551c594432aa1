"""No product module is over 400 lines (issue 15): one that grows past it is split, not stretched.

Physical lines, as ``wc -l`` counts them: docstrings and comments are part of what a reader
has to hold, so they count too.
"""
from __future__ import annotations

import pytest

from tests.repo.test_layering import product_modules

MAX_LINES = 400


def physical_lines(text: str) -> int:
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


@pytest.mark.parametrize("module", sorted(product_modules()))
def test_module_is_at_most_400_lines(module):
    lines = physical_lines(product_modules()[module].read_text())
    assert lines <= MAX_LINES, f"{module}: {lines} lines; split it along a seam of its own"


def test_the_count_is_wc_l():
    assert physical_lines("") == 0
    assert physical_lines("a\nb\n") == 2
    assert physical_lines("a\nb") == 2   # a last line without its newline still counts
    assert physical_lines("\n" * 401) == 401
