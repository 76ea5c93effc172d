"""A structured answer's numbers are read and written exactly, and checked as written.

An ``output_schema`` answer reaches its dependents as canonical JSON. Read through floats,
``3.14159265358979323846`` reached them as ``3.141592653589793`` and ``-0`` as ``0``; now
each number is kept as the answer wrote it (`JSONNumber`), the rest of the canonical form is
unchanged (sorted keys, two-space indents: an answer whose numbers were already written as
Python writes floats has the same canonical text as before), and the schema holds the exact
value: ``0.07`` is a multiple of ``0.01``, ``0.1`` is not below a ``minimum`` of ``0.1``.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance._core.json_answer import JSONNumber, dumps_answer, read_json_answer
from clearance._core.routing import EdgeCondition
from clearance._core.schema_check import schema_errors
from clearance._orchestration.structured import validated_json

ANSWER = (
    '{"pi": 3.14159265358979323846, "big": 123456789012345678901234567890, '
    '"exp": 1e5, "Exp": 2.5E-300, "neg_zero": -0, "neg_zero_f": -0.0, "count": 1.0E2, '
    '"list": [0.1000000000000000055511151231257827, -12.50]}'
)
CANONICAL = """{
  "Exp": 2.5E-300,
  "big": 123456789012345678901234567890,
  "count": 1.0E2,
  "exp": 1e5,
  "list": [
    0.1000000000000000055511151231257827,
    -12.50
  ],
  "neg_zero": -0,
  "neg_zero_f": -0.0,
  "pi": 3.14159265358979323846
}"""


def test_a_structured_answer_keeps_every_number_as_written():
    assert validated_json(ANSWER, {"type": "object"}) == CANONICAL
    assert validated_json(f"Here:\n```json\n{ANSWER}\n```\n", {"type": "object"}) == CANONICAL


def test_exact_values_are_what_the_schema_holds():
    value = read_json_answer(ANSWER, exact=True)
    assert isinstance(value["pi"], JSONNumber)
    assert value["pi"] == Decimal("3.14159265358979323846")
    assert value["big"] == 123456789012345678901234567890
    assert str(value["neg_zero"]) == "-0" and value["neg_zero"] == 0


DRAFT_4 = "http://json-schema.org/draft-04/schema#"
NEAR_TENTH = "0.1000000000000000055511151231257827"  # the float 0.1, exactly


@pytest.mark.parametrize(
    ("schema", "answer", "ok"),
    [
        ({"type": "number", "multipleOf": 0.01}, "0.07", True),  # floats: 7.000000000000001
        ({"type": "number", "multipleOf": 0.01}, "0.071", False),
        ({"type": "number", "multipleOf": 0.5}, "12345678901234567890.5", True),
        ({"type": "number", "multipleOf": 3}, "1.2e1", True),
        ({"type": "number", "minimum": 0.1}, "0.1", True),  # not below the float 0.1
        ({"type": "number", "minimum": 0.1}, "0.09999999999999999999", False),
        ({"type": "number", "maximum": 3.14159}, "3.14159000000000000001", False),
        ({"type": "number", "exclusiveMaximum": 1}, "0.99999999999999999999", True),
        ({"type": "number", "exclusiveMaximum": 1}, "1.0", False),
        ({"type": "integer"}, "1.0E2", True),  # 2020-12: a number with no fraction
        ({"type": "integer"}, "1.5", False),
        ({"type": "integer"}, "-0", True),
        ({"$schema": DRAFT_4, "type": "integer"}, "1.0", False),
        ({"$schema": DRAFT_4, "type": "integer"}, "-0", True),
        ({"$schema": DRAFT_4, "minimum": 1, "exclusiveMinimum": True}, "1.00", False),
        ({"const": 0.1}, "0.10", True),
        ({"const": 0.1}, NEAR_TENTH, False),
        ({"enum": [1, "a"]}, "1.000", True),
        ({"enum": [0.3]}, "0.30000000000000004", False),
        ({"type": "array", "uniqueItems": True}, "[1, 1.0]", False),
        ({"type": "array", "uniqueItems": True}, f"[0.1, {NEAR_TENTH}]", True),
    ],
)
def test_the_schema_holds_the_exact_value(schema, answer, ok):
    errors = schema_errors(schema, read_json_answer(answer, exact=True))
    assert (not errors) is ok, errors
    if not ok:  # a repair names the number as the answer wrote it
        with pytest.raises(ValueError, match="does not match the output schema"):
            validated_json(answer, schema)


def test_a_refusal_quotes_the_number_as_written():
    with pytest.raises(ValueError, match=r"0\.050 is less than the minimum of 0\.1"):
        validated_json('{"r": 0.050}', {"properties": {"r": {"minimum": 0.1}}})


@pytest.mark.parametrize("answer", ["1e400", "-1E999", "1e-400", "NaN", "[Infinity]"])
def test_what_no_float_can_hold_stays_refused(answer):
    with pytest.raises(ValueError, match=r"out of range|not valid JSON"):
        validated_json(answer, {})


def test_a_number_past_any_exponent_is_one_line_not_a_crash():
    with pytest.raises(ValueError, match="out of range"):
        validated_json('{"x": 1e-99999999999999999999999}', {})


def test_routing_compares_exact_values_with_the_team_files():
    result = validated_json('{"v": 1.0, "p": 0.1, "z": -0.0, "big": 1.0000000000000000001}', {})
    assert EdgeCondition.of("t", {"/v": 1}).unmet(result) is None  # 1 equals 1.0
    assert EdgeCondition.of("t", {"/p": 0.1}).unmet(result) is None  # the float 0.1 as written
    assert EdgeCondition.of("t", {"/z": 0}).unmet(result) is None
    assert EdgeCondition.of("t", {"/v": True}).unmet(result) is not None  # true is not 1
    unmet = EdgeCondition.of("t", {"/big": 1}).unmet(result)  # not 1 through a float
    assert unmet == "/big of 't' is 1.0000000000000000001, not 1"


TEXT = st.text(st.characters(exclude_categories=("Cs",)))  # no lone surrogate
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_canonical_text_is_unchanged_for_numbers_written_as_floats_are(value):
    # Runs recorded before hold this text; the same answer must still give it.
    legacy = json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
    text = json.dumps(value)
    assert dumps_answer(read_json_answer(text, exact=True)) == legacy
    compact = json.dumps(value, ensure_ascii=False, sort_keys=True)
    assert dumps_answer(read_json_answer(text, exact=True), indent=None) == compact


def test_a_number_of_many_digits_is_checked_within_a_second():
    started = time.monotonic()
    digits = "0." + "7" * 200_000
    schema = {"properties": {"r": {"multipleOf": 0.01, "minimum": 0.1, "type": "integer"}}}
    with pytest.raises(ValueError, match=r"\$\.r: 0\.777"):
        validated_json(f'{{"r": {digits}}}', schema)
    half = "0.5" + "0" * 200_000  # 0.5 exactly, in 200,001 digits
    assert validated_json(f"[{half}]", {"items": {"multipleOf": 0.5}}) == f"[\n  {half}\n]"
    assert time.monotonic() - started < 1.5
