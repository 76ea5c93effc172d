"""Reading a model's JSON answer: one reader for the run and for ``clearance verify``.

A structured answer (a task's ``output_schema``, a reviewer's verdict) is model output. It is
read strictly, the same way wherever it is read, so that what the run acted on is what
``verify`` finds in the record: no ``NaN`` or ``Infinity``, no number beyond a float's range,
no key given twice in one object (Python would keep the last value where another reader, or a
person, may take the first), and a fenced block (```` ```json ````) when the whole answer is
not JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["loads_strict", "read_json_answer"]

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


def loads_strict(text: str) -> Any:
    """``text`` read as JSON, as every answer is read here (no NaN, no key given twice...).

    Raises:
        ValueError: As `read_json_answer` (`json.JSONDecodeError` for text that is not JSON).
        RecursionError: The JSON is nested too deeply to read.
    """
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                      object_pairs_hook=_unique_keys, strict=False)  # fmt: skip


_loads = loads_strict


def read_json_answer(body: str) -> Any:
    """The JSON value of an answer: the whole text, else its first fenced code block.

    Raises:
        ValueError: With a one-line reason: the answer (or its fenced block) is not valid
            JSON, holds ``NaN``, ``Infinity`` or a number beyond a float's range, or gives a
            key twice in one object.
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
