"""Kinds are compared with enum members, never with string literals, outside the vocabulary.

Every module under ``src/clearance`` is parsed with `ast`. A *kind expression* is a name or
attribute ending in ``kind`` (``kind``, ``event.kind``, ``parsed.kind``), or a read of a
``"kind"`` key (``data.get("kind")``, ``data["kind"]``). The test fails on any comparison
(``==``, ``!=``, ``in``, ``not in``) of a kind expression with a string literal or a
tuple/list/set holding one, and on any ``match`` over a kind expression with a string pattern,
anywhere but ``_core/vocabulary.py``, where the kinds are defined.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

from clearance._core.vocabulary import EventKind, OriginKind, PromptKind, RunEventKind, StepKind
from clearance._orchestration.result import RunEvent

SRC = Path(__file__).resolve().parents[1] / "src" / "clearance"
VOCABULARY = SRC / "_core" / "vocabulary.py"


def _is_kind(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id.endswith("kind")
    if isinstance(node, ast.Attribute):
        return node.attr.endswith("kind")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        first = node.args[0] if node.args else None
        return node.func.attr == "get" and isinstance(first, ast.Constant) and first.value == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    return False


def _has_string(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_has_string(e) for e in node.elts)
    return False


def _string_pattern(pattern: ast.pattern) -> bool:
    if isinstance(pattern, ast.MatchValue):
        return _has_string(pattern.value)
    if isinstance(pattern, ast.MatchOr):
        return any(_string_pattern(p) for p in pattern.patterns)
    if isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
        return _string_pattern(pattern.pattern)
    return False


_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def string_comparisons(tree: ast.AST) -> Iterator[int]:
    """Yield the line of every kind compared with a string literal in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for (left, right), op in zip(itertools.pairwise(operands), node.ops, strict=True):
                if not isinstance(op, _OPS):
                    continue
                if (_is_kind(left) and _has_string(right)) or (
                    _is_kind(right) and _has_string(left)
                ):
                    yield node.lineno
        elif (
            isinstance(node, ast.Match)
            and _is_kind(node.subject)
            and any(_string_pattern(case.pattern) for case in node.cases)
        ):
            yield node.lineno


def test_no_kind_is_compared_with_a_string_literal() -> None:
    found = [
        f"{path.relative_to(SRC.parent)}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        if path != VOCABULARY
        for line in string_comparisons(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], "compare kinds with members of _core/vocabulary.py:\n" + "\n".join(found)


def test_the_scanner_finds_every_form() -> None:
    source = """
if event.kind == "spawn": pass
if "file" != kind: pass
if kind in ("task", "isolated"): pass
if data.get("kind") == "question": pass
if row["kind"] not in {"a"}: pass
match parsed.kind:
    case "plan" | "synthesis": pass
if kind == OriginKind.FILE: pass
if kind in ALLOWED: pass
"""
    assert sorted(string_comparisons(ast.parse(source))) == [2, 3, 4, 5, 6, 7]


def test_members_are_their_stored_strings() -> None:
    assert OriginKind.TASK_RESULT == "task_result" and str(OriginKind.TASK_RESULT) == "task_result"
    assert f"{PromptKind.SYNTHESIS_MAP}:1" == "synthesis_map:1"
    for enum in (EventKind, OriginKind, PromptKind, RunEventKind, StepKind):
        assert all(member.value == member.name.lower() for member in enum)


def test_run_event_kind_is_the_one_definition() -> None:
    assert RunEvent.__annotations__["kind"] in ("RunEventKind", RunEventKind)
