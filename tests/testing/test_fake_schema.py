"""The fake model answers a task with ``output_schema`` with a valid, deterministic instance."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from clearance.cli import app
from clearance.testing._instance import schema_instance

ROOT = Path(__file__).resolve().parents[2]


class Finding(BaseModel):
    severity: Literal["high", "low"]
    score: float = Field(gt=0, lt=1)
    count: int = Field(ge=3)
    note: str = Field(min_length=12, max_length=20)


class Review(BaseModel):
    module: str
    findings: list[Finding] = Field(min_length=2)
    parent: Finding | None
    optional: str = "kept out"


SCHEMAS: list[dict[str, Any]] = [
    Review.model_json_schema(),
    {"type": "object", "required": ["a", "b"], "properties": {
        "a": {"type": ["null", "integer"], "exclusiveMinimum": 4, "maximum": 9},
        "b": {"allOf": [{"required": ["c"], "properties": {"c": {"const": 7}}},
                        {"required": ["d"], "properties": {"d": {"type": "boolean"}}}]}}},
    {"type": "array", "prefixItems": [{"type": "string", "maxLength": 3}], "minItems": 2,
     "items": {"type": "number", "maximum": -2}},
    {"type": "integer", "exclusiveMaximum": 0},
]  # fmt: skip


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_instance_is_valid_against_its_schema(schema):
    value = schema_instance(schema, "0123456789abcdef")
    jsonschema.validate(value, schema)
    assert value == schema_instance(schema, "0123456789abcdef")  # deterministic


def test_a_pydantic_model_parses_the_instance():
    review = Review.model_validate(schema_instance(Review.model_json_schema(), "digest"))
    assert len(review.findings) == 2 and review.findings[0].severity == "high"
    assert len(review.findings[0].note) == 12 and 0 < review.findings[0].score < 1
    assert review.optional == "kept out"  # only required properties are written


def test_the_code_review_example_completes_on_the_fake_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    example = str(ROOT / "examples" / "code_review.yaml")
    result = CliRunner().invoke(app, ["run", example, "--model", "fake:review", "--db", db])
    assert result.exit_code == 0, result.output
    run_id = re.search(r"run id: (\S+)", result.output).group(1)
    data = json.loads(CliRunner().invoke(app, ["inspect", run_id, "--db", db, "--json"]).output)
    reviews = {t["task_id"]: t for t in data["tasks"] if t["task_id"].startswith("review-")}
    assert reviews and {t["status"] for t in reviews.values()} == {"completed"}
    for task in reviews.values():
        answer = json.loads(task["result"])
        assert set(answer) == {"module", "summary", "findings"} and answer["findings"] == []
        assert answer["module"].endswith(".py") and len(answer["summary"]) == 16
