"""Structured answers and output schemas built to hang, crash or mislead the check.

A model's answer is checked against its task's ``output_schema`` in bounded time, and
anything that cannot be checked is a one-line reason (the repair prompt's), never a crash.
"""

from __future__ import annotations

import json
import time

import pytest

from clearance import Agent, ConfigError, Orchestrator, RunLedger, Task, Team
from clearance._context.verify import verify_run
from clearance._core import schema_check
from clearance._orchestration.structured import validated_json
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

TEAM = Team(agents=(Agent(name="alpha", instructions="You answer."),))


async def run_one(tmp_path, schema, answer):
    def reply(request: ModelRequest) -> str:
        return "SYNTH" if request.prompt.manifest.subject == "synthesis" else answer

    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    task = Task(id="a", title="A", description="Answer.", assignee="alpha", output_schema=schema)
    model = FunctionModel(reply)
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks([task])
    return ledger, result, model


async def test_a_lone_surrogate_in_an_answer_fails_the_task_not_the_run(tmp_path):
    # It was kept as the result, and the next prompt holding it crashed the run mid-way,
    # leaving it recorded `running`.
    ledger, result, model = await run_one(tmp_path, {"type": "object"}, '{"s": "\\ud800"}')
    outcome = result.tasks["a"]
    assert outcome.status == "failed" and outcome.result is None
    assert "lone surrogate" in (outcome.error or "")
    repair = [r for r in model.requests if r.prompt.manifest.subject == "task:a"][1]
    assert "Problem: the answer is not valid JSON: the JSON holds a lone surrogate" in (
        repair.prompt.text
    )
    assert ledger.get_run(result.run_id).status == "failed"
    assert verify_run(ledger, result.run_id).ok


@pytest.mark.parametrize("key", ['"\\udfff"', '"ok"'])
def test_a_lone_surrogate_is_refused_as_a_key_or_in_a_list(key):
    with pytest.raises(ValueError, match="lone surrogate"):
        validated_json('{%s: ["x", "\\ud83d"]}' % key, {"type": "object"})  # noqa: UP031
    assert json.loads(validated_json('{"s": "\\ud83d\\ude00"}', {"type": "object"}))["s"] == "😀"


async def test_unique_items_of_thousands_of_objects_is_checked_in_linear_time(tmp_path):
    # Every pair was compared: 5,000 objects took minutes.
    schema = {"type": "object", "properties": {"u": {"type": "array", "uniqueItems": True}}}
    answer = json.dumps({"u": [{"k": i} for i in range(5_000)]})
    started = time.monotonic()
    ledger, result, _ = await run_one(tmp_path, schema, answer)
    assert time.monotonic() - started < 10
    assert result.tasks["a"].status == "completed"
    assert verify_run(ledger, result.run_id).ok


@pytest.mark.parametrize(
    ("items", "unique"),
    [([1, 1.0], False), ([True, 1], True), ([{"a": [1]}, {"a": [1.0]}], False),
     ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False), ([0, False, None, "", [], {}], True),
     ([10**400, 10**400 + 1], True)],
)  # fmt: skip
def test_unique_items_holds_json_equality(items, unique):
    schema = {"type": "array", "uniqueItems": True}
    answer = json.dumps(items)
    if unique:
        validated_json(answer, schema)
    else:
        with pytest.raises(ValueError, match="non-unique elements"):
            validated_json(answer, schema)


def test_an_answer_of_thousands_of_picks_from_thousands_of_values_is_checked_fast():
    # An x-enum-from of thousands of values, and an answer naming thousands: each pick was
    # compared with every value.
    values = [f"symbol_{i}" for i in range(12_000)]
    schema = {"type": "array", "items": {"enum": values}}
    started = time.monotonic()
    validated_json(json.dumps(values[::-1]), schema)
    with pytest.raises(ValueError, match="is not one of"):
        validated_json(json.dumps([*values, "nope"]), schema)
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError, match="is not one of"):
        validated_json("true", {"enum": [1]})  # true is not 1
    assert validated_json("1.0", {"enum": [1]})


def test_a_pattern_that_backtracks_is_cut_off_in_time(monkeypatch):
    monkeypatch.setattr(schema_check, "PATTERN_SECONDS", 0.3)
    schema = {"type": "object", "patternProperties": {"^(a|aa)+$": {"type": "integer"}},
              "additionalProperties": False}  # fmt: skip
    started = time.monotonic()
    for answer in ({"a" * 60 + "!": 1}, {"s": {"a" * 60 + "!": 1}}):
        with pytest.raises(ValueError, match=r"patterns took over 0.3 seconds"):
            validated_json(json.dumps(answer), {**schema, "properties": {"s": schema}})
    assert time.monotonic() - started < 5
    assert validated_json('{"aaaa": 1}', schema)  # a match is fine
    with pytest.raises(ValueError, match="'b' was unexpected"):
        validated_json('{"b": 1}', schema)


@pytest.mark.parametrize(
    ("schema", "answer", "says"),
    [
        ({"type": "integer", "multipleOf": 0.5}, "1" * 400, "too large to check"),
        ({"$ref": "#"}, "{}", "refers to itself without end"),
        ({"$defs": {"x": {"$ref": "#/$defs/x"}}, "$ref": "#/$defs/x"}, "1", "itself"),
        ({"$ref": "#/$defs/missing"}, "1", "cannot be checked"),
    ],
)
def test_what_cannot_be_checked_is_a_one_line_value_error(schema, answer, says):
    with pytest.raises(ValueError, match=says) as caught:
        validated_json(answer, schema)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"$ref": "https://example.invalid/s.json"}, "points outside the schema"),
        ({"properties": {"a": {"$dynamicRef": "other.json#x"}}}, "points outside the schema"),
        ({"patternProperties": {"^x": {}}, "unevaluatedProperties": False}, "unevaluated"),
        ("deep", "over 128 levels deep"),
        # `regex` unrolls counted repeats as it compiles: this one took all memory, and the
        # process was killed.
        ({"pattern": "((a{65535}){65535}){65535}"}, "would unroll past 10000 elements"),
        ({"patternProperties": {"(?:[a-z]{200}){200}": {}}}, "unroll past"),
    ],
)
def test_an_output_schema_that_cannot_be_checked_safely_is_refused(schema, says):
    if schema == "deep":
        schema = {}
        for _ in range(500):
            schema = {"type": "array", "items": schema}
    with pytest.raises(ConfigError, match=says):
        Task(id="t", title="T", description="D.", assignee="alpha", output_schema=schema)


async def test_a_reviewer_verdict_with_a_lone_surrogate_fails_the_task_not_the_run(tmp_path):
    from clearance._core.review import Review

    team = Team(agents=(Agent(name="dev", instructions="You implement."),
                        Agent(name="rev", instructions="You review.")))  # fmt: skip

    def reply(request: ModelRequest) -> str:
        subject = request.prompt.manifest.subject
        if subject.startswith("review:"):
            return '{"verdict": "revise", "findings": "broken \\udc00"}'
        return "SYNTH" if subject == "synthesis" else "CANDIDATE"

    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    task = Task(id="build", title="Build", description="Build it.", assignee="dev",
                review=Review(by=("rev",), rounds=3))  # fmt: skip
    result = await Orchestrator(team, model=FunctionModel(reply), ledger=ledger).run_tasks([task])
    assert result.tasks["build"].status == "failed"
    assert "lone surrogate" in (result.tasks["build"].error or "")
    assert ledger.get_run(result.run_id).status == "failed"
    assert verify_run(ledger, result.run_id).ok


def test_a_pattern_of_modest_counted_repeats_is_still_used():
    schema = {"type": "string", "pattern": r"^(\d{3}-){3}[0-9a-f]{8}$"}
    assert validated_json('"123-456-789-0badcafe"', schema)
    with pytest.raises(ValueError, match="does not match"):
        validated_json('"123-456-0badcafe"', schema)
