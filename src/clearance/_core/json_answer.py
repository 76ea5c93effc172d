"""Reading a model's JSON answer: one reader for the run and for ``clearance verify``.

A structured answer (a task's ``output_schema``, a reviewer's verdict) is model output. It is
read strictly, the same way wherever it is read, so that what the run acted on is what
``verify`` finds in the record: no ``NaN`` or ``Infinity``, no number beyond a float's range,
no key given twice in one object (Python would keep the last value where another reader, or a
person, may take the first), no nesting deeper than `MAX_ANSWER_DEPTH` levels, no lone
surrogate (an unpaired U+D800 to U+DFFF: no UTF-8 text holds one), and a fenced
block (```` ```json ````) when the whole answer is not JSON.

A task's structured answer is read ``exact``: each number that is not a plain integer is a
`JSONNumber`, its value a `~decimal.Decimal` and its text as the answer wrote it, so
`dumps_answer` writes it back digit for digit (``3.14159265358979323846``, ``1.0E2``, ``-0``)
and the schema holds the value written, not the nearest float. A number no float can hold
(``1e400``, ``1e-400``) is still refused: most readers of the result would read an infinity
or zero.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = [
    "MAX_ANSWER_DEPTH",
    "JSONNumber",
    "deeper_than",
    "dumps_answer",
    "loads_strict",
    "read_json_answer",
]

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


class JSONNumber(Decimal):
    """A JSON number read exactly: a `~decimal.Decimal` that keeps the text it was read from.

    It compares, hashes and orders as its exact value (``JSONNumber("1.0") == 1``); `text`
    is the number as the answer wrote it, which `dumps_answer` writes back and a schema
    error quotes (its ``repr``). Arithmetic on it gives a plain `~decimal.Decimal`.

    Attributes:
        text: The number's JSON text (``"1.0E2"``, ``"-0"``).
    """

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> JSONNumber:
        """The number ``text`` (JSON number syntax, already checked by the reader)."""
        number = super().__new__(cls, text)
        number.text = text
        return number

    @property
    def integer_token(self) -> bool:
        """Whether it was written with no fraction and no exponent (``-0``)."""
        return not any(mark in self.text for mark in ".eE")

    def __repr__(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    def __reduce__(self) -> tuple[type[JSONNumber], tuple[str]]:
        return type(self), (self.text,)


def _exact_number(text: str) -> JSONNumber:
    """A JSON number with a fraction or exponent, exactly; one no float can hold is refused.

    ``1e400`` (an infinity as a float) and ``1e-400`` (zero as a float) are refused: most
    readers of the result would read them so.
    """
    try:
        number: JSONNumber | None = JSONNumber(text)
    except InvalidOperation:  # an exponent past the decimal module's own range
        number = None
    as_float = float(text)
    if number is None or math.isinf(as_float) or (as_float == 0 and number != 0):
        raise ValueError(f"the number {text[:40]} is out of range")
    return number


def _exact_integer(text: str) -> int | JSONNumber:
    """A JSON integer: an `int`, except ``-0``, kept as written (an `int` has no sign of 0)."""
    return JSONNumber(text) if text == "-0" else int(text)


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


def loads_strict(text: str, *, exact: bool = False) -> Any:
    """``text`` read as JSON, as every answer is read here (no NaN, no key given twice...).

    Args:
        text: The JSON text.
        exact: Read each number that is not a plain integer (and ``-0``) as a `JSONNumber`,
            not a float.

    Raises:
        ValueError: As `read_json_answer` (`json.JSONDecodeError` for text that is not JSON).
        RecursionError: The JSON is nested too deeply to read.
    """
    if exact:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_exact_number,
                           parse_int=_exact_integer, object_pairs_hook=_unique_keys,
                           strict=False)  # fmt: skip
    else:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                           object_pairs_hook=_unique_keys, strict=False)  # fmt: skip
    if deeper_than(value, MAX_ANSWER_DEPTH):
        raise ValueError(f"the JSON nests objects and lists over {MAX_ANSWER_DEPTH} levels deep")
    if _lone_surrogate(value):
        raise ValueError("the JSON holds a lone surrogate (an unpaired U+D800 to U+DFFF)")
    return value


def read_json_answer(body: str, *, exact: bool = False) -> Any:
    """The JSON value of an answer: the whole text, else its first fenced code block.

    Args:
        body: The answer.
        exact: Read its numbers exactly (`loads_strict`): a task's structured answer.

    Raises:
        ValueError: With a one-line reason: the answer (or its fenced block) is not valid
            JSON, holds ``NaN``, ``Infinity`` or a number beyond a float's range, gives a
            key twice in one object, nests over `MAX_ANSWER_DEPTH` levels, or holds a lone
            surrogate (an unpaired U+D800 to U+DFFF).
        RecursionError: The JSON is nested too deeply to read.
    """
    try:
        return loads_strict(body, exact=exact)
    except ValueError as exc:
        match = _FENCED_JSON.search(body)
        if match is None:
            raise ValueError(f"the answer is not valid JSON: {exc}") from exc
        try:
            return loads_strict(match.group(1), exact=exact)
        except ValueError as inner:
            raise ValueError(f"the fenced block is not valid JSON: {inner}") from inner


def dumps_answer(value: Any, *, indent: int | None = 2, sort_keys: bool = True) -> str:
    """A JSON value as canonical text: sorted keys, non-ASCII as is, numbers as written.

    The text of ``json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=True)``,
    except that a `JSONNumber` is written as its `~JSONNumber.text` (and any other
    `~decimal.Decimal` as its ``str``): a structured answer's numbers reach its dependents
    as the model wrote them. An answer whose numbers are written as Python writes its ints
    and floats has the same text as before exact numbers.

    Args:
        value: A JSON value (dicts with string keys, lists, strings, numbers, booleans,
            ``None``), nested no deeper than the interpreter's recursion limit allows.
        indent: Spaces per level (each item on a line of its own), or ``None`` for one line
            (``", "`` and ``": "`` between items).
        sort_keys: Write an object's members sorted by key; ``False``: in their order (with
            ``indent=None``, the text of ``json.dumps(value, ensure_ascii=False)``).

    Raises:
        ValueError: A float or `~decimal.Decimal` that is NaN or infinite.
        TypeError: A value of another type, or a key that is not a string.
    """
    out: list[str] = []
    _write(value, out, "\n" if indent is not None else "", " " * (indent or 0), sort_keys)
    return "".join(out)


def _write(value: Any, out: list[str], newline: str, step: str, sort_keys: bool = True) -> None:
    """Append ``value``'s canonical text to ``out`` (``newline``: the current line break)."""
    if isinstance(value, str):
        out.append(_encode_string(value))
    elif value is None or isinstance(value, bool):
        out.append("null" if value is None else "true" if value else "false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float | Decimal):
        if not value.is_finite() if isinstance(value, Decimal) else not math.isfinite(value):
            raise ValueError(f"{value!r} is not a JSON number")
        out.append(str(value) if isinstance(value, Decimal) else float.__repr__(value))
    elif isinstance(value, list | tuple | dict):
        items = value if not isinstance(value, dict) else list(value.items())
        items = sorted(items) if sort_keys and isinstance(value, dict) else items
        if not items:
            out.append("{}" if isinstance(value, dict) else "[]")
            return
        inner = newline + step if newline else ""
        out.append("{" if isinstance(value, dict) else "[")
        for index, item in enumerate(items):
            out.append(("," if newline else ", ") + inner if index else inner)
            if isinstance(value, dict):
                key, item = item
                if not isinstance(key, str):
                    raise TypeError(f"a key of a JSON object must be a string, not {key!r:.40}")
                out.append(_encode_string(key) + ": ")
            _write(item, out, inner, step, sort_keys)
        out.append(newline + ("}" if isinstance(value, dict) else "]"))
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


_encode_string = json.encoder.encode_basestring
"""A string as JSON text, non-ASCII as is (what ``json.dumps(ensure_ascii=False)`` uses)."""
