"""`EdgeCondition`: conditional routing, a dependency edge that holds only for some results.

A task may make one of its dependency edges conditional on that dependency's structured
result (its ``output_schema`` answer): a mapping of JSON Pointers (RFC 6901) to the values
they must equal, all of them::

    depends_on: [{task: triage, when: {"/severity": "high"}}]

When the dependency completes, each condition on it is evaluated; a dependent whose condition
does not hold is ``skipped`` with the reason (which pointer held what), and so are its own
dependents (unless their ``after_failure`` is ``proceed``). Nothing is evaluated as code: a
condition is data compared for equality (JSON values: ``1`` equals ``1.0``, ``true`` is not
``1``; numbers exactly, as the result and the team file write them: ``1.0000000000000000001``
is not ``1``). The graph stays a DAG: a condition can only prune edges, never add one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from clearance._core.errors import ConfigError
from clearance._core.json_answer import JSONNumber, dumps_answer

__all__ = ["ROUTED_PREFIX", "EdgeCondition", "resolve_pointer"]

ROUTED_PREFIX = "skipped: condition not met: "
"""How the recorded reason of a task skipped by a condition starts."""

_MISSING = object()
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")
"""An array index of RFC 6901: ASCII digits, no leading zero (never ``"²"``, a digit to Python)."""


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at a JSON Pointer (RFC 6901) in ``document``, or a sentinel when absent.

    Returns:
        The value, or an object that equals no JSON value (the pointer leads nowhere).
    """
    if pointer == "":
        return document
    value = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and _ARRAY_INDEX.fullmatch(token):
            if len(token) > len(str(len(value))) or int(token) >= len(value):
                return _MISSING  # never an int of thousands of digits
            value = value[int(token)]
        else:
            return _MISSING
    return value


def _number(text: str) -> Decimal | float:
    """A JSON number with a fraction or exponent as its exact value (`JSONNumber`).

    A float for one past the decimal module's exponents (not in a checked result).
    """
    try:
        return JSONNumber(text)
    except ArithmeticError:
        return float(text)


def _exact_json(text: str) -> Any:
    """``text`` read as JSON with its numbers exact (as `_same` compares them)."""
    return json.loads(text, parse_float=_number)


def _same(found: Any, expected: Any) -> bool:
    """Whether two JSON values are equal: numbers as numbers, exactly; booleans apart.

    Compared as values, never through floats: an integer beyond a float's range (a model may
    answer one) is no error, ``9007199254740993`` does not equal ``9007199254740992``, and
    ``0.1000000000000000001`` does not equal ``0.1`` (both sides are read exactly).
    """
    if isinstance(found, bool) or isinstance(expected, bool):
        return type(found) is type(expected) and found == expected
    if isinstance(found, int | float | Decimal) and isinstance(expected, int | float | Decimal):
        return found == expected  # exact between int, float and Decimal, never an overflow
    if isinstance(found, list) and isinstance(expected, list):
        return len(found) == len(expected) and all(map(_same, found, expected))
    if isinstance(found, dict) and isinstance(expected, dict):
        return found.keys() == expected.keys() and all(
            _same(found[k], expected[k]) for k in expected
        )
    return type(found) is type(expected) and found == expected


@dataclass(frozen=True, kw_only=True, slots=True)
class EdgeCondition:
    """A condition on one dependency edge (see the module docstring).

    Attributes:
        task: The dependency whose result is tested.
        equals: ``(JSON Pointer, expected value as JSON text)`` pairs; all must hold.

    Raises:
        ConfigError: No pair, a pointer that is neither ``""`` (the whole result) nor
            starts with ``/``, or a value that is not JSON.
    """

    task: str
    equals: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, task: str, when: Mapping[str, Any], *, where: str = "when") -> EdgeCondition:
        """The condition ``when`` (pointer to expected value) on dependency ``task``.

        Raises:
            ConfigError: See the class.
        """
        if not when:
            raise ConfigError("a condition needs at least one pointer", field=where)
        pairs = []
        for pointer, expected in when.items():
            if not isinstance(pointer, str) or not (pointer == "" or pointer.startswith("/")):
                raise ConfigError(
                    f"{pointer!r} is not a JSON Pointer ('' or starting with '/')", field=where
                )
            try:
                pairs.append((pointer, json.dumps(expected, sort_keys=True, allow_nan=False)))
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{pointer}: not a JSON value: {exc}", field=where) from exc
        return cls(task=task, equals=tuple(sorted(pairs)))

    def when(self) -> dict[str, Any]:
        """The condition as pointer to expected value (the team file's ``when:``)."""
        return {pointer: json.loads(text) for pointer, text in self.equals}

    def unmet(self, result: str) -> str | None:
        """Why the condition does not hold for the dependency's result; ``None`` if it holds.

        Args:
            result: The dependency's result text (canonical JSON for a structured result;
                any other text holds no pointer).
        """
        try:
            document = _exact_json(result)
        except ValueError:
            return f"the result of {self.task!r} is not JSON"
        for pointer, text in self.equals:
            found = resolve_pointer(document, pointer)
            if found is _MISSING:
                return f"{pointer} is absent from the result of {self.task!r}, wanted {text}"
            if not _same(found, _exact_json(text)):
                shown = dumps_answer(found, indent=None)
                if len(shown) > 80:
                    shown = shown[:77] + "..."
                return f"{pointer or 'the result'} of {self.task!r} is {shown}, not {text}"
        return None
