"""One complexity measure: McCabe's, counted the way ruff's ``C901`` counts it.

The report, the ranking and the model's facts all use this one number, so a function's
complexity reads the same beside ruff's own "too complex (N > 10)" message. It is 1 plus
the decision points of the function's statements: ``if``/``elif``, ``for``, ``while``,
each ``except`` handler, a ``try``'s ``else``, each ``case`` of a ``match`` (an irrefutable
last case counts as an ``else``), and 1 plus the body of every nested ``def``. Boolean
operators, conditional expressions, comprehensions and ``assert`` do not count (as in
ruff and the ``mccabe`` package).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

__all__ = ["COMPLEXITY_NAME", "complexity"]

COMPLEXITY_NAME = "McCabe complexity, as ruff's C901 counts it"
"""The measure's name, as reports print it."""


def complexity(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """McCabe complexity of one function, as ruff's ``C901`` computes it.

    Args:
        function: A parsed ``def`` or ``async def``.

    Returns:
        1 + the decision points of its body (nested functions included, see the module
        docstring); at least 1.
    """
    return 1 + _statements(function.body)


def _irrefutable(case: ast.match_case) -> bool:
    pattern = case.pattern
    if case.guard is not None:
        return False
    while isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
        pattern = pattern.pattern
    if isinstance(pattern, ast.MatchOr):
        return any(isinstance(p, ast.MatchAs) and p.pattern is None for p in pattern.patterns)
    return isinstance(pattern, ast.MatchAs) and pattern.pattern is None


def _statements(body: Sequence[ast.stmt]) -> int:
    count = 0
    for stmt in body:
        if isinstance(stmt, ast.If | ast.For | ast.AsyncFor | ast.While):
            count += 1 + _statements(stmt.body) + _statements(stmt.orelse)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            count += _statements(stmt.body)
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                count += 1 + _statements(case.body)
            if stmt.cases and _irrefutable(stmt.cases[-1]):
                count -= 1
        elif isinstance(stmt, ast.Try | ast.TryStar):
            count += _statements(stmt.body) + _statements(stmt.finalbody)
            if stmt.orelse:
                count += 1 + _statements(stmt.orelse)
            for handler in stmt.handlers:
                count += 1 + _statements(handler.body)
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            count += 1 + _statements(stmt.body)
        elif isinstance(stmt, ast.ClassDef):
            count += _statements(stmt.body)
    return count
