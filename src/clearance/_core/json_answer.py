"""Reading a model's JSON answer: one reader for the run and for ``clearance verify``.

A structured answer (a task's ``output_schema``, a reviewer's verdict) is model output. It is
read strictly, the same way wherever it is read, so that what the run acted on is what
``verify`` finds in the record: no ``NaN`` or ``Infinity``, no number beyond a float's range,
no key given twice in one object (Python would keep the last value where another reader, or a
person, may take the first), no nesting deeper than `MAX_ANSWER_DEPTH` levels, no lone
surrogate (an unpaired U+D800 to U+DFFF: no UTF-8 text holds one), and a fenced
block (```` ```json ````) when the whole answer is not JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["MAX_ANSWER_DEPTH", "deeper_than", "loads_strict", "read_json_answer"]

MAX_ANSWER_DEPTH = 64
"""Most levels of nesting (objects and lists) a JSON answer may have. Deeper is refused: how
deep Python can read JSON depends on the stack in use where it is read, so an answer read once
near that limit could fail when a dependent's condition, the run's result or ``verify`` reads
it again elsewhere. No output schema needs this much."""

_FENCED_JSON = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.DOTALL)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    """A JSON number as a float; one beyond a float's range (``1e999``) is refused.

    Python would read it as an infinity, which no JSON text can hold.
    """
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members; a key given twice is refused."""
    value = dict(pairs)
    if len(value) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key[:40]!r} is given twice in one object")
            seen.add(key)
    return value


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and lists more than ``limit`` levels (walked)."""
    level: list[tuple[Any, int]] = [(value, 1)]
    while level:
        node, depth = level.pop()
        if isinstance(node, dict | list):
            if depth > limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            level.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _lone_surrogate(value: Any) -> bool:
    """Whether a string of ``value`` (a key or a value) holds a lone surrogate (U+D800...).

    No UTF-8 text can hold one, so neither could the ledger, a prompt or a file.
    """
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not node.isascii():
                try:
                    node.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(node, dict):
            stack.extend(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def loads_strict(text: str) -> Any:
    """``text`` read as JSON, as every answer is read here (no NaN, no key given twice...).

    Raises:
        ValueError: As `read_json_answer` (`json.JSONDecodeError` for text that is not JSON).
        RecursionError: The JSON is nested too deeply to read.
    """
    value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                       object_pairs_hook=_unique_keys, strict=False)  # fmt: skip
    if deeper_than(value, MAX_ANSWER_DEPTH):
        raise ValueError(f"the JSON nests objects and lists over {MAX_ANSWER_DEPTH} levels deep")
    if _lone_surrogate(value):
        raise ValueError("the JSON holds a lone surrogate (an unpaired U+D800 to U+DFFF)")
    return value


_loads = loads_strict


def read_json_answer(body: str) -> Any:
    """The JSON value of an answer: the whole text, else its first fenced code block.

    Raises:
        ValueError: With a one-line reason: the answer (or its fenced block) is not valid
            JSON, holds ``NaN``, ``Infinity`` or a number beyond a float's range, gives a
            key twice in one object, nests over `MAX_ANSWER_DEPTH` levels, or holds a lone
            surrogate (an unpaired U+D800 to U+DFFF).
        RecursionError: The JSON is nested too deeply to read.
    """
    try:
        return _loads(body)
    except ValueError as exc:
        match = _FENCED_JSON.search(body)
        if match is None:
            raise ValueError(f"the answer is not valid JSON: {exc}") from exc
        try:
            return _loads(match.group(1))
        except ValueError as inner:
            raise ValueError(f"the fenced block is not valid JSON: {inner}") from inner
