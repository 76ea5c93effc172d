"""`canonical_json`: the one text every prompt and record digest is computed on."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance._core.prompt import canonical_json, canonical_json_sha256, sha256_text

STDLIB = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""The encoder earlier versions computed digests with: their recorded digests must verify."""

# Every kind of value a digested record holds: text (any code point but lone surrogates,
# which UTF-8 cannot encode), integers, booleans, None, lists and string-keyed dicts.
text = st.text(st.characters(exclude_categories=("Cs",)))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=16,
)


@given(json_values)
def test_equals_the_standard_library_canonical_text(value: Any) -> None:
    assert canonical_json(value) == STDLIB.encode(value)


@given(json_values)
def test_its_digest_is_the_digest_of_the_canonical_text(value: Any) -> None:
    assert canonical_json_sha256(value) == sha256_text(STDLIB.encode(value))


@pytest.mark.parametrize(
    "value",
    [
        '\x00\x1f\x7f " \\ / \u2028 \u2029 \ufeff é 漢 \U0001f600',
        {"b": 1, "a": {"d": [], "c": None}},
        [True, False, None, 0, -1],
    ],
)
def test_escapes_and_key_order_are_the_standard_librarys(value: Any) -> None:
    assert canonical_json(value) == STDLIB.encode(value)


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        {1: "a", 2: "b"},  # keys that are not strings
        [2**64, -(2**63) - 1],  # integers beyond 64 bits
        _nested(300),  # deeper than orjson nests
    ],
)
def test_what_orjson_refuses_is_encoded_by_the_standard_library(value: Any) -> None:
    with pytest.raises(TypeError):
        orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    assert canonical_json(value) == STDLIB.encode(value)
    assert canonical_json_sha256(value) == sha256_text(STDLIB.encode(value))


def test_a_lone_surrogate_has_no_digest_as_before() -> None:
    with pytest.raises(UnicodeEncodeError):
        sha256_text(canonical_json(["\ud800"]))
    with pytest.raises(UnicodeEncodeError):
        canonical_json_sha256(["\ud800"])


def test_a_value_no_encoder_can_serialize_raises_type_error() -> None:
    with pytest.raises(TypeError):
        canonical_json({"a": object()})
    with pytest.raises(TypeError):
        canonical_json_sha256({"a": object()})


@pytest.mark.parametrize("number", [2.106992849075452e-05, 1e-05, 1e16, 0.1, -0.0, 5e-324])
def test_a_float_is_written_alike_whichever_encoder_writes_its_record(number: float) -> None:
    # A record's digest may not depend on whether another of its fields (an integer beyond
    # 64 bits here) sent it to the standard library: `payload_sha256` splices a JSON
    # column's text in as it is, and verify digests the same record read back.
    alone = canonical_json({"x": number})
    beside = canonical_json({"x": number, "y": [2**64]})
    assert beside == alone[:-1] + ',"y":[18446744073709551616]}'
    assert canonical_json_sha256({"x": number, "y": [2**64]}) == sha256_text(beside)
