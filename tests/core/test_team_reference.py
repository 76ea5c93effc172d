"""The team file's reference: generated from `RunSpec`, committed, and true of the examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from clearance import RunSpec
from clearance._core import team_reference
from clearance._core.team_reference import example_fragments
from clearance.runs import SCHEMA_ID, team_file_markdown, team_file_schema

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
MAP_SECTIONS = {"PriceSpec", "McpServerSpec", "ToolEntrySpec"}


def validator(schema: dict[str, Any] | None = None) -> jsonschema.Draft202012Validator:
    full = team_file_schema()
    return jsonschema.Draft202012Validator(schema or full)


def test_the_committed_reference_is_the_generated_one() -> None:
    """Regenerate with ``clearance schema > docs/team-file.schema.json`` and
    ``clearance schema --markdown > docs/team-file.md``."""
    schema_text = json.dumps(team_file_schema(), indent=2) + "\n"
    assert (DOCS / SCHEMA_ID).read_text(encoding="utf-8") == schema_text
    assert (DOCS / "team-file.md").read_text(encoding="utf-8") == team_file_markdown()


def test_the_schema_is_valid_and_describes_every_key() -> None:
    schema = team_file_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    described = 0
    for definition in [schema, *schema["$defs"].values()]:
        for key, prop in definition.get("properties", {}).items():
            assert prop.get("description", "").strip(), key
            described += 1
    assert described >= 120  # every part of RunSpec, not only the top level


def test_a_key_described_nowhere_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    descriptions = {k: dict(v) for k, v in team_reference.DESCRIPTIONS.items()}
    del descriptions["TaskSpec"]["run"]
    monkeypatch.setattr(team_reference, "DESCRIPTIONS", descriptions)
    with pytest.raises(ValueError, match=r"TaskSpec\.run has no description"):
        team_file_schema()


def test_the_markdown_lists_every_key_with_its_type_default_and_example() -> None:
    text = team_file_markdown()
    schema = team_file_schema()
    for name, heading, example in team_reference.SECTIONS:
        definition = schema if name == "RunSpec" else schema["$defs"][name]
        section = text.split(f"## {heading if name == 'RunSpec' else f'`{heading}`'}\n")[1]
        section = section.split("\n## ")[0]
        for key in definition["properties"]:
            assert f"| `{key}` |" in section, (heading, key)
        if example:
            assert example.rstrip("\n") in section
    assert "| `max_output_tokens` | integer | `512` |" in text
    assert "| `agents` | list of [AgentSpec](#agents) | required |" in text


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_team_file_validates_against_the_schema(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    errors = [e.message for e in validator().iter_errors(data)]
    assert errors == []
    RunSpec.from_file(path)  # and the models agree


def test_the_schema_refuses_what_the_models_refuse() -> None:
    base: dict[str, Any] = {"agents": [{"name": "a", "instructions": "x"}]}
    assert validator().is_valid(base)
    for bad in (
        {**base, "agnets": []},
        {"agents": [{"name": "a", "instructions": "x", "limits": {"retries": -1}}]},
        {**base, "executor": {"kind": "cloud"}},
        {**base, "report": "code_review_report"},
    ):
        assert not validator().is_valid(bad), bad
        with pytest.raises(ValueError):
            RunSpec.model_validate(bad)


@pytest.mark.parametrize("name", sorted(example_fragments()))
def test_each_section_example_is_valid(name: str) -> None:
    schema = team_file_schema()
    part = {"$ref": f"#/$defs/{name}", "$defs": schema["$defs"]}
    (value,) = example_fragments()[name].values()
    items = value if isinstance(value, list) else [value]
    if name in MAP_SECTIONS:
        items = list(value.values())
    for item in items:
        assert [e.message for e in validator(part).iter_errors(item)] == []


def test_the_reference_names_every_built_in_tool_and_step() -> None:
    """An agent's ``tools:`` and a task's ``run:`` list what a user may write there."""
    from clearance._agents.tools import BUILTIN_TOOL_NAMES
    from clearance._agents.workspace_tools import WRITE_OUTPUT_TOOL
    from clearance.analysis._steps import STEPS

    text = team_file_markdown()
    tools_row = next(line for line in text.splitlines() if line.startswith("| `tools` | list"))
    run_row = next(line for line in text.splitlines() if line.startswith("| `run` |"))
    assert all(f"`{name}`" in tools_row for name in (*BUILTIN_TOOL_NAMES, WRITE_OUTPUT_TOOL))
    assert all(f"`{name}`" in run_row for name in STEPS)
