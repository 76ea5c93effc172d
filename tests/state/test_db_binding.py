"""How values reach the database: JSON columns' text and ``sqlite3``'s binding of ``None``.

`serialize_json` writes JSON with orjson where that reads back as the standard library's text
would, and is the standard library's ``json.dumps`` everywhere else (same text, same errors).
"""

from __future__ import annotations

import enum
import json
import math
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine

from clearance._core.prompt import canonical_json
from clearance._state.db import DriverStatement, JSONText
from clearance._state.db.sqlite import _bind_none_directly
from clearance._state.db.types import canonical_json_text, serialize_json
from clearance._state.ledger.statements import statement


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Mode(enum.StrEnum):
    FAST = "fast"


@dataclass
class Point:
    x: int


@pytest.mark.parametrize(
    "value",
    [
        {"max_tokens": 512, "temperature": 0.7, "top_p": None, "stop": ["END"], "tools": []},
        [{"id": "a", "depends_on": []}, {"id": "b", "depends_on": ["a"], "n": -3}],
        ["a", "b"],
        [],
        {},
        None,
        "plain",
        {"text": 'naïve ☃ \u2028 "quoted" \\ \n', "flag": True, "zero": -0.0},
        {"small": 1e-05, "big": 1.5e300, "u64": 2**64 - 1},
        {"level": Level.LOW, "mode": Mode.FAST},  # members of int and str enums: their values
        ["a", Mode.FAST],
    ],
)
def test_plain_values_read_back_as_json_dumps_writes_them(value: Any) -> None:
    text = serialize_json(value)
    assert type(text) is str
    assert json.loads(text) == json.loads(json.dumps(value))
    assert ", " not in text and ": " not in text  # compact: orjson wrote it


@pytest.mark.parametrize(
    "value",
    [
        {"temperature": math.nan},  # orjson would write null
        [math.inf, -math.inf],
        ("a", "b"),  # a tuple reads back as a list
        {"nested": ("a", 1)},
        {1: "int key"},  # orjson refuses keys that are not strings
        {"big": 2**70},  # ... integers beyond 64 bits
        ["lone \ud800 surrogate"],  # ... lone surrogates
        ["a", JSONText("[]")],  # ... subclasses of str (other than enums' members)
    ],
)
def test_what_orjson_would_write_otherwise_is_json_dumps_text(value: Any) -> None:
    assert serialize_json(value) == json.dumps(value)
    assert canonical_json_text(value) is None  # no canonical text: stored the old way


@pytest.mark.parametrize(
    "value",
    [
        [{"id": "b", "depends_on": ["a"], "output_schema": {"minimum": 0.5}}, {"id": "a"}],
        {"text": 'naïve ☃ \u2028 "quoted"', "u64": 2**64 - 1, "zero": -0.0, "none": None},
        [],
    ],
)
def test_a_plain_value_has_its_canonical_text(value: Any) -> None:
    text = canonical_json_text(value)
    assert type(text) is JSONText and text == canonical_json(value)
    assert json.loads(text) == value
    assert serialize_json(text) == text  # stored as it is


@pytest.mark.parametrize(
    "value",
    [
        {"id": uuid.UUID(int=1)},  # orjson writes these; json.dumps refuses them
        {"colour": Colour.RED},
        [datetime(2026, 1, 1, tzinfo=UTC)],
        {"point": Point(1)},
        {"set": {1, 2}},
    ],
)
def test_what_json_dumps_refuses_is_refused(value: Any) -> None:
    with pytest.raises(TypeError):
        json.dumps(value)
    with pytest.raises(TypeError):
        serialize_json(value)


def test_json_text_is_stored_as_it_is_as_a_plain_str() -> None:
    text = serialize_json(JSONText('{"b":1,"a":[ 2 ]}'))
    assert text == '{"b":1,"a":[ 2 ]}'
    assert type(text) is str


def test_none_binds_as_null_without_an_adapter_search() -> None:
    assert (type(None), sqlite3.PrepareProtocol) in sqlite3.adapters
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a, b)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(None, 1), (None, None)])
    assert conn.execute("SELECT typeof(a), typeof(b) FROM t").fetchall() == [
        ("null", "integer"),
        ("null", "null"),
    ]
    conn.close()


def test_an_adapter_registered_for_none_already_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    key = (type(None), sqlite3.PrepareProtocol)

    def theirs(_value: None) -> str:
        return "theirs"

    monkeypatch.setitem(sqlite3.adapters, key, theirs)
    _bind_none_directly()
    assert sqlite3.adapters[key] is theirs


def _task_row(task_id: str, depends_on: list[str], started_at: datetime | None) -> dict[str, Any]:
    return {
        "run_id": "run_1",
        "task_id": task_id,
        "title": task_id.upper(),
        "assignee": "a",
        "depends_on": depends_on,
        "memory_scope": "dependencies",
        "status": "running",
        "result": None,
        "error": None,
        "started_at": started_at,
        "finished_at": None,
    }


def test_parameters_of_many_rows_are_each_rows_parameters_processed() -> None:
    dialect = create_engine("sqlite://", json_serializer=serialize_json).dialect
    rows = [
        _task_row("a", [], datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        _task_row("b", ["a"], None),
        _task_row(
            "c", ["a", "b"], datetime(2026, 1, 2, 4, 4, 5, tzinfo=timezone(timedelta(hours=1)))
        ),
    ]
    driver = DriverStatement(statement("task", "sqlite"), dialect, tuple(rows[0]))
    many = driver.parameters_many(rows)
    assert many == [driver.parameters(row) for row in rows]
    assert [p[:2] for p in many] == [("run_1", "a"), ("run_1", "b"), ("run_1", "c")]
    assert '["a","b"]' in many[2] and "2026-01-02 03:04:05.000000" in many[2]
    assert driver.parameters_many([]) == []


def test_parameters_of_rows_leaving_a_bound_name_out_are_each_rows_parameters() -> None:
    dialect = create_engine("sqlite://", json_serializer=serialize_json).dialect
    rows = [{"run_id": "run_1", "team": "t", "status": "running"}] * 2  # requests... left out
    driver = DriverStatement(statement("run", "sqlite"), dialect, ("run_id", "team", "status"))
    assert driver.parameters_many(rows) == [driver.parameters(row) for row in rows]


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.sampled_from([Level.LOW, Mode.FAST]),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_any_value_reads_back_as_json_dumps_writes_it(value: Any) -> None:
    """Whatever path `serialize_json` takes (plain values are not read back to check), its
    text reads back as the standard library's does; NaN compared as text."""
    expected = json.dumps(value)
    text = serialize_json(value)
    assert json.loads(text, parse_constant=str) == json.loads(expected, parse_constant=str)
