"""x-enum-from: a property's allowed values come from a prerequisite's structured result."""

from __future__ import annotations

import json

from clearance._core.schema_enum import narrowed_schema
from clearance._core.spec import Task

SCHEMA = {
    "type": "object",
    "properties": {
        "symbol": {"type": "string", "maxLength": 60, "enum": [""], "x-enum-from": "symbols"},
        "rule": {"type": "string", "x-enum-from": "rules"},
        "note": {"type": "string"},
    },
}


def test_values_come_from_the_results_and_the_keyword_is_gone():
    results = [json.dumps({"symbols": ["loads", "dump"], "rules": []}), "plain text", "[1]"]
    narrowed = narrowed_schema(SCHEMA, results)
    props = narrowed["properties"]
    assert props["symbol"] == {"type": "string", "enum": ["", "dump", "loads"]}
    assert props["rule"] == {"type": "string", "enum": [""]}  # none listed: only ""
    assert props["note"] == {"type": "string"}
    assert "x-enum-from" not in json.dumps(narrowed)
    assert SCHEMA["properties"]["symbol"]["x-enum-from"] == "symbols"  # not mutated


def test_a_schema_without_the_keyword_is_returned_as_is_and_the_keyword_is_valid():
    plain = {"type": "object"}
    assert narrowed_schema(plain, ["{}"]) is plain
    task = Task(id="t", title="t", description="d", assignee="a", output_schema=SCHEMA)
    assert task.output_schema is not None  # an annotation: the written schema is valid
