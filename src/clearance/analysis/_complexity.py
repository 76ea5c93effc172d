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

__all__ = ["COMPLEXITY_NAME", "complexities", "complexity"]

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
    return complexities(function)[function]


Function = ast.FunctionDef | ast.AsyncFunctionDef


def complexities(node: ast.AST) -> dict[Function, int]:
    """The complexity (`complexity`) of every ``def`` in ``node``, ``node`` included.

    One walk of the statements, without recursion: an ``elif`` nests in its ``if``'s
    ``orelse`` with no indentation, so a chain of thousands of them (which parses) nests as
    deep; and each function of a chain of nested functions would otherwise walk all that
    lies below it again. A function's complexity is 1, plus its own decision points, plus
    the complexity of each function nested in it.
    """
    own: dict[Function, int] = {}
    nested: dict[Function, list[Function]] = {}
    pending: list[tuple[Sequence[ast.stmt], Function | None]] = []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        own[node], nested[node] = 0, []
        pending.append((node.body, node))
    else:
        pending.append((_body(node), None))
    while pending:
        body, owner = pending.pop()
        points = 0
        for stmt in body:
            points += _decisions(stmt)
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                own[stmt], nested[stmt] = 0, []
                if owner is not None:
                    nested[owner].append(stmt)
                pending.append((stmt.body, stmt))
            else:
                pending.extend((block, owner) for block in _blocks(stmt))
        if owner is not None:
            own[owner] += points
    found: dict[Function, int] = {}
    for function in reversed(own):  # a nested def is found after the def that holds it
        found[function] = 1 + own[function] + sum(found[n] for n in nested[function])
    return found


def _body(node: ast.AST) -> Sequence[ast.stmt]:
    body = getattr(node, "body", None)
    return body if isinstance(body, list) else []


def _decisions(stmt: ast.stmt) -> int:
    """The decision points of ``stmt`` itself (its blocks' statements are counted apart)."""
    if isinstance(stmt, ast.If | ast.For | ast.AsyncFor | ast.While):
        return 1
    if isinstance(stmt, ast.Match):
        last = 1 if stmt.cases and _irrefutable(stmt.cases[-1]) else 0
        return len(stmt.cases) - last
    if isinstance(stmt, ast.Try | ast.TryStar):
        return (1 if stmt.orelse else 0) + len(stmt.handlers)
    return 0


def _blocks(stmt: ast.stmt) -> list[Sequence[ast.stmt]]:
    """The blocks of ``stmt`` whose statements count towards its function's complexity."""
    if isinstance(stmt, ast.If | ast.For | ast.AsyncFor | ast.While):
        return [stmt.body, stmt.orelse]
    if isinstance(stmt, ast.With | ast.AsyncWith | ast.ClassDef):
        return [stmt.body]
    if isinstance(stmt, ast.Match):
        return [case.body for case in stmt.cases]
    if isinstance(stmt, ast.Try | ast.TryStar):
        return [stmt.body, stmt.finalbody, stmt.orelse, *(h.body for h in stmt.handlers)]
    return []


def _irrefutable(case: ast.match_case) -> bool:
    pattern = case.pattern
    if case.guard is not None:
        return False
    while isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
        pattern = pattern.pattern
    if isinstance(pattern, ast.MatchOr):
        return any(isinstance(p, ast.MatchAs) and p.pattern is None for p in pattern.patterns)
    return isinstance(pattern, ast.MatchAs) and pattern.pattern is None
