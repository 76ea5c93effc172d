"""Holding a value to a task's ``output_schema``: bounded in time, never fetching anything.

The schema comes from a team file and the value from a model, so neither is trusted:

- a ``$ref`` must point into the schema itself (``#...``): one to a URL or a file is refused
  when the task is made, and nothing is ever fetched while checking (an empty registry);
- a ``pattern`` (and a ``patternProperties`` name) is matched with a time limit, so a
  pattern that backtracks without end (``(a|aa)+$``) cannot hang a run or ``clearance verify``:
  the patterns of one check share `PATTERN_SECONDS` (the matcher lets other threads run
  meanwhile); a pattern whose counted repeats would unroll past `MAX_PATTERN_SIZE` when
  compiled (``(?:a{65535}){65535}``: gigabytes) is refused before it is compiled;
- ``uniqueItems`` and ``enum`` are checked by hashing, not by comparing every pair, so a
  long answer (or thousands of ``x-enum-from`` values) is checked in linear time;
- a number too large for the schema's arithmetic, or a ``$ref`` that refers to itself
  without end, is a one-line `ValueError`, never a crash.

JSON equality holds as in JSON Schema: ``1`` equals ``1.0``; ``true`` is not ``1``.

A structured answer's numbers are exact (`~clearance._core.json_answer.JSONNumber`, a
`~decimal.Decimal`), and are held to the schema exactly: a schema's float is taken as the
number its shortest text says (``0.1``, not the binary float nearest it), so ``0.07`` is a
multiple of ``0.01`` and ``0.1`` is not below a ``minimum`` of ``0.1``; ``1.0E2`` is an
integer where ``1.0`` is (from draft 6), and ``-0`` is one in every draft.
"""

from __future__ import annotations

import functools
import math
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from decimal import Decimal, Inexact, Rounded, localcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "MAX_PATTERN_SIZE",
    "PATTERN_SECONDS",
    "schema_errors",
    "schema_problem",
    "schema_validator",
]

PATTERN_SECONDS = 2.0
"""Most seconds the regular expressions of one schema check may take together."""
MAX_PATTERN_SIZE = 10_000
"""Most elements a pattern may have once its counted repeats are unrolled (``(ab){3}`` has 6):
the ``regex`` package unrolls them when it compiles, some hundreds of bytes each."""
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
_deadline: ContextVar[float | None] = ContextVar("clearance_schema_deadline", default=None)


class _PatternTimeout(Exception):
    """The check's regular expressions used up their time."""


class _PatternUnusable(Exception):
    """A pattern met while checking cannot be compiled (`schema_problem` would have said so)."""


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` (a valid JSON Schema) cannot be used as an output schema, or ``None``.

    A ``$ref`` that points outside the schema (not ``#...``: a URL, a file) is refused, and
    so is a pattern this module cannot run, or ``unevaluatedProperties`` in a schema with
    ``patternProperties`` (whose patterns it would run with no time limit).
    """
    stack: list[Any] = [schema]
    patterns: list[str] = []
    unevaluated = named = False
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        if not isinstance(node, dict):
            continue
        for keyword in _REF_KEYWORDS:
            ref = node.get(keyword)
            if isinstance(ref, str) and not ref.startswith("#"):
                return f"{keyword} {ref[:100]!r} points outside the schema; only '#...' is allowed"
        if isinstance(node.get("pattern"), str):
            patterns.append(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            patterns.extend(node["patternProperties"])
            named = True
        unevaluated = unevaluated or "unevaluatedProperties" in node
        stack.extend(node.values())
    if unevaluated and named:
        return "unevaluatedProperties cannot be used with patternProperties"
    for pattern in patterns:
        try:
            _compiled(pattern)
        except Exception as exc:  # regex.error: a pattern `re` took but `regex` does not
            return f"the pattern {pattern[:100]!r} cannot be used: {exc}"
    return None


def _unrolled_size(pattern: str) -> int:
    """How many elements ``pattern`` has with its counted repeats unrolled (at most one more).

    Counting stops past `MAX_PATTERN_SIZE`. Each element (a character, an escape, a class)
    counts 1; a group counts what it holds, its alternatives added; ``{m}``, ``{m,}`` and
    ``{m,n}`` multiply what they repeat by ``m`` (``regex`` unrolls the least count). An
    estimate, read without compiling.
    """
    frames: list[list[int]] = [[0, 0, 0]]  # per group: alternatives so far, sequence, last
    counted = re.compile(r"\{(\d*)(?:,(\d*))?\}")
    i, end = 0, len(pattern)
    while i < end:
        char, size, step = pattern[i], 1, 1
        frame = frames[-1]
        if char == "\\":
            step = 2
            if pattern[i + 1 : i + 2] in ("p", "P", "N", "x", "u", "U", "g") and (
                pattern[i + 2 : i + 3] == "{" and (close := pattern.find("}", i)) != -1
            ):
                step = close + 1 - i
        elif char == "[":
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            j += pattern[j : j + 1] == "]"
            while j < end and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            step = j + 1 - i
        elif char == "(":
            frames.append([0, 0, 0])
            i += 1
            continue
        elif char == ")" and len(frames) > 1:
            inner = frames.pop()
            frame, size = frames[-1], inner[0] + inner[1]
        elif char == "|":
            frame[0], frame[1], frame[2] = frame[0] + frame[1], 0, 0
            i += 1
            continue
        elif char == "{" and (match := counted.match(pattern, i)) and match.group(1):
            least = int(match.group(1)) if len(match.group(1)) < 7 else MAX_PATTERN_SIZE + 1
            frame[1] += frame[2] * (max(least, 1) - 1)
            if frame[0] + frame[1] > MAX_PATTERN_SIZE:
                return MAX_PATTERN_SIZE + 1
            i = match.end()
            continue
        elif char in "*+?":
            i += 1
            continue
        frame[1] += size
        frame[2] = size
        if frame[0] + frame[1] > MAX_PATTERN_SIZE:  # a group's size reaches its parent
            return MAX_PATTERN_SIZE + 1  # when it closes, so one frame at a time suffices
        i += step
    return min(sum(f[0] + f[1] for f in frames), MAX_PATTERN_SIZE + 1)


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """``pattern`` compiled by ``regex``, refused if it would unroll too large.

    Raises:
        ValueError: Past `MAX_PATTERN_SIZE`; ``regex.error``: not a pattern ``regex`` takes.
    """
    import regex  # type: ignore[import-untyped]

    if _unrolled_size(pattern) > MAX_PATTERN_SIZE:
        raise ValueError(
            f"its counted repeats would unroll past {MAX_PATTERN_SIZE} elements (too large)"
        )
    return regex.compile(pattern)


def _search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, within the check's time left."""
    deadline = _deadline.get()
    left = PATTERN_SECONDS if deadline is None else deadline - time.monotonic()
    if left <= 0:
        raise _PatternTimeout
    try:
        compiled = _compiled(pattern)
    except Exception as exc:  # regex.error, or too large: one line from `schema_errors`
        raise _PatternUnusable(f"the pattern {pattern[:100]!r} cannot be used: {exc}") from exc
    try:
        return compiled.search(text, timeout=left, concurrent=True) is not None
    except TimeoutError as exc:
        raise _PatternTimeout from exc


def _exact(number: Any) -> Any:
    """A finite float as the exact number its shortest text says (``0.1``); others as they are.

    Two floats are equal exactly when these are, so comparing them so changes nothing
    between floats; an exact number (a `~decimal.Decimal`) is compared with what the
    schema's author wrote, not with the binary float nearest it.
    """
    if isinstance(number, float) and math.isfinite(number):
        return Decimal(float.__repr__(number))
    return number


def _key(value: Any) -> Any:
    """A hashable form of a JSON value: equal exactly when the values are equal in JSON."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float | Decimal):
        return ("n", _exact(value))  # 1 == 1.0 == Decimal("1.00"), and so are their hashes
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(_key(item) for item in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, _key(v)) for k, v in value.items()))
    return ("z", value)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{repr(instance)[:200]} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if _search(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Any:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [
        name
        for name in instance
        if name not in named and not any(_search(p, name) for p in patterns)
    ]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        listed = ", ".join(repr(name) for name in sorted(extras))
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(
            f"Additional properties are not allowed ({listed:.300} {verb} unexpected)"
        )


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _key(item)
        if key in seen:
            yield ValidationError(f"{instance!r:.200} has non-unique elements")
            return
        seen.add(key)


_enum_keys: ContextVar[dict[int, tuple[Any, frozenset[Any]]] | None] = ContextVar(
    "clearance_schema_enums", default=None
)


def _enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not isinstance(enums, list):
        enums = [enums]
    cache = _enum_keys.get()
    held = cache.get(id(enums)) if cache is not None else None
    if held is None or held[0] is not enums:
        held = (enums, frozenset(_key(each) for each in enums))
        if cache is not None:
            cache[id(enums)] = held  # the list is held too, so its id is not reused
    if _key(instance) not in held[1]:
        shown = repr(enums[:20])[:300] + (f" (of {len(enums)} values)" if len(enums) > 20 else "")
        yield ValidationError(f"{repr(instance)[:200]} is not one of {shown}")


def _const(validator: Any, const: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if _key(instance) != _key(const):
        yield ValidationError(f"{const!r:.200} was expected")


def _multiple(number: Decimal | int, divisor: Decimal | int) -> bool:
    """Whether ``number`` is a whole multiple of ``divisor`` (> 0), exactly.

    Decimal arithmetic with the precision the quotient needs (every operand is a number a
    float can hold, or an integer of at most 4300 digits), trapping any rounding.

    Raises:
        OverflowError: The quotient is too long to hold (not for such operands).
    """
    top, bottom = Decimal(number), Decimal(divisor)
    digits = len(top.as_tuple().digits) + len(bottom.as_tuple().digits)
    with localcontext() as context:
        context.prec = digits + max(0, top.adjusted() - bottom.adjusted()) + 2
        context.traps[Inexact] = context.traps[Rounded] = True
        try:
            return bool(top % bottom == 0)
        except ArithmeticError as exc:
            raise OverflowError("the quotient of multipleOf is too long") from exc


def _multiple_of(original: Callable[..., Any]) -> Callable[..., Iterator[Any]]:
    """``multipleOf`` checked exactly.

    A float instance, or an integer past a float's range with a fractional divisor, is
    checked as ``original`` checks it (the latter: "too large to check").
    """

    def check(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[Any]:
        from jsonschema.exceptions import ValidationError

        exact = _exact(divisor)
        if (
            isinstance(instance, bool)
            or not isinstance(instance, int | Decimal)
            or isinstance(exact, bool)
            or not isinstance(exact, int | Decimal)
            or (isinstance(divisor, float) and _past_floats(instance))
        ):
            yield from original(validator, divisor, instance, schema) or ()
        elif exact > 0 and not _multiple(instance, exact):
            yield ValidationError(f"{instance!r} is not a multiple of {divisor}")

    return check


def _past_floats(number: Any) -> bool:
    """Whether ``number`` is an integer past a float's range (compared exactly, no overflow)."""
    return isinstance(number, int) and abs(number) > sys.float_info.max


def _bound(original: Callable[..., Any]) -> Callable[..., Iterator[Any]]:
    """A bound (``minimum``...) that compares an exact number with the bound as written."""

    def check(validator: Any, bound: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if isinstance(instance, Decimal) and isinstance(bound, float):
            bound = _written(bound)
        yield from original(validator, bound, instance, schema) or ()

    return check


def _written(number: float) -> Any:
    """A float bound as an exact number that shows as written (``0.1``) in an error."""
    from clearance._core.json_answer import JSONNumber

    return JSONNumber(float.__repr__(number)) if math.isfinite(number) else number


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


@functools.cache
def _bounded(base: Any) -> Any:
    from jsonschema.validators import extend

    keywords: dict[str, Any] = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "uniqueItems": _unique_items,
        "enum": _enum,
    }
    if "const" in base.VALIDATORS:  # from draft 6
        keywords["const"] = _const
    for name in ("multipleOf", "divisibleBy"):  # divisibleBy: draft 3
        if name in base.VALIDATORS:
            keywords[name] = _multiple_of(base.VALIDATORS[name])
    for bound in _BOUNDS:
        if bound in base.VALIDATORS:
            keywords[bound] = _bound(base.VALIDATORS[bound])
    checker = base.TYPE_CHECKER
    fraction_ok = checker.is_type(1.0, "integer")  # draft 6 on: 1.0 is an integer

    def is_integer(_: Any, instance: Any) -> bool:
        if isinstance(instance, Decimal):
            return (
                instance.is_finite()
                and instance == instance.to_integral_value()
                and (fraction_ok or getattr(instance, "integer_token", False))
            )
        return bool(checker.is_type(instance, "integer"))

    return extend(  # type: ignore[no-untyped-call]
        base, keywords, type_checker=checker.redefine("integer", is_integer)
    )


def schema_validator(schema: dict[str, Any]) -> Validator:
    """A validator for ``schema``, in its own dialect (``$schema``; 2020-12 by default).

    Its regular expressions are time-limited (within `schema_errors`), ``uniqueItems`` and
    ``enum`` are hashed, and no ``$ref`` is ever fetched.
    """
    from jsonschema.validators import Draft202012Validator, validator_for
    from referencing import Registry

    base = validator_for(schema, default=Draft202012Validator)
    validator: Validator = _bounded(base)(schema, registry=Registry())
    return validator


def schema_errors(
    schema: dict[str, Any],
    value: Any,
    *,
    seconds: float | None = None,
    subject: str = "the output schema",
    value_name: str = "the answer",
) -> list[Any]:
    """Every `ValidationError` of ``value`` against ``schema`` (see the module docstring).

    Args:
        schema: A checked JSON Schema.
        value: The JSON value.
        seconds: Most seconds its regular expressions may take together (default
            `PATTERN_SECONDS`).
        subject: What the schema is, in the errors (``"the output schema"``).
        value_name: What the value is, in the errors (``"the answer"``).

    Raises:
        ValueError: One line: the patterns took over ``seconds``; one cannot be compiled; a
            number is too large for the schema's arithmetic; the schema refers to itself
            without end, or to something it does not hold.
    """
    seconds = PATTERN_SECONDS if seconds is None else seconds
    deadline = _deadline.set(time.monotonic() + seconds)
    enums = _enum_keys.set({})
    try:
        return list(schema_validator(schema).iter_errors(value))
    except _PatternTimeout:
        raise ValueError(
            f"{subject}'s patterns took over {seconds:g} seconds on {value_name}"
        ) from None
    except _PatternUnusable as exc:
        raise ValueError(str(exc)) from None
    except OverflowError as exc:
        raise ValueError(f"a number is too large to check against the schema: {exc}") from exc
    except RecursionError as exc:
        raise ValueError(f"{subject} is nested too deeply or refers to itself without end") from exc
    except Exception as exc:  # an unresolvable $ref: the schema cannot be used
        from referencing.exceptions import Unresolvable

        if isinstance(exc, Unresolvable) or isinstance(exc.__cause__, Unresolvable):
            raise ValueError(f"{subject} cannot be checked: {exc!s:.200}") from exc
        raise
    finally:
        _enum_keys.reset(enums)
        _deadline.reset(deadline)
