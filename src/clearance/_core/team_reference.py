"""The team file's reference, generated from `RunSpec`: its JSON Schema and a Markdown page.

Every key of a team file is a field of `RunSpec` or of one of its parts; its description is
taken from the model's ``Attributes:`` docstring section (`RunSpec`, `ExecutorSpec`,
`McpServerSpec`; ``limits:`` from `AgentLimits`) or from
`clearance._core.teamfile_descriptions`. A key described nowhere is an error, so a new
setting cannot reach the reference undocumented. ``docs/team-file.md`` and
``docs/team-file.schema.json`` are the output of `team_file_markdown` and
`team_file_schema`; a test regenerates both and fails when they differ.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from pydantic import BaseModel

from clearance._core.agent_spec import AgentLimits
from clearance._core.locations import SCHEMA_ID
from clearance._core.run_spec import RunSpec
from clearance._core.teamfile_descriptions import DESCRIPTIONS

__all__ = ["SCHEMA_ID", "SECTIONS", "example_fragments", "team_file_markdown", "team_file_schema"]

SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("RunSpec", "Top level", ""),
    ("AgentSpec", "agents", "agents:\n  - name: writer\n    instructions: You write.\n"),
    ("LimitsSpec", "agents[].limits", "limits: {max_output_tokens: 300, timeout_s: 120}\n"),
    ("SamplingSpec", "agents[].sampling", "sampling: {temperature: 0.2, stop: ['\\n\\n']}\n"),
    ("AgentMemorySpec", "agents[].memory", "memory: {recall: 3, record: result}\n"),
    (
        "TaskSpec",
        "tasks",
        "tasks:\n  - {id: draft, title: Draft, description: Write., assignee: writer}\n",
    ),
    (
        "DependencySpec",
        "tasks[].depends_on (long form)",
        "depends_on:\n  - {task: triage, when: {/route: bug}}\n",
    ),
    ("ReviewSpec", "tasks[].review", "review: {by: [critic], rounds: 2}\n"),
    ("FanOutSpec", "tasks[].fan_out", "fan_out: {agent: scout, goals: [Find A, Find B]}\n"),
    ("MessageSpec", "messages", "messages:\n  - {from: editor, to: writer, content: Be brief.}\n"),
    ("BudgetSpec", "budget", "budget: {tokens: 200000, cost_usd: 0.5}\n"),
    (
        "PriceSpec",
        "prices",
        "prices:\n  openai:gpt-4o-mini: {input_per_mtok: 0.15, output_per_mtok: 0.6}\n",
    ),
    ("McpServerSpec", "mcp_servers", "mcp_servers:\n  glossary: {command: [python, server.py]}\n"),
    (
        "ToolEntrySpec",
        "tools (long form)",
        "tools:\n  publish: {function: mytools:publish, approval: required}\n",
    ),
    ("MemorySpec", "memory (long form)", "memory: {url: sqlite:///memory.db, on_error: fail}\n"),
    (
        "MemoryGroupSpec",
        "memory_groups",
        "memory_groups:\n  - {name: desk, agents: [writer, editor]}\n",
    ),
    (
        "SharedConversationSpec",
        "memory_groups[].shared_conversation",
        "shared_conversation: {window: 10, retrieval: recency}\n",
    ),
    ("ExecutorSpec", "executor", "executor: {kind: ray, workers: 4, env: [OPENAI_API_KEY]}\n"),
    ("ModelOptionsSpec", "model_options", "model_options: {context_window: 8192, threads: 4}\n"),
    ("InputSpec", "input", "input: {default: python:json, include: ['*.py']}\n"),
    ("IsolationSpec", "isolation", "isolation: {max_rounds: 2}\n"),
    ("FileCapsSpec", "isolation.file_caps", "file_caps: {max_file_bytes: 65536}\n"),
    (
        "PlanRefSpec",
        "plan",
        "plan:\n  run_id: RUN_ID\n"
        "  tasks_sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n",
    ),
)
"""The reference's sections: model name, heading (the key's path), and an example."""

_ATTRIBUTE = re.compile(r"^ {8}(\w+): (.*)$")


def _attributes(doc: str | None) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style docstring, by name, one line each."""
    found: dict[str, str] = {}
    name = None
    in_section = False
    for line in (doc or "").splitlines():
        if line.strip() == "Attributes:":
            in_section = True
            continue
        if not in_section:
            continue
        match = _ATTRIBUTE.match(line)
        if match:
            name = match.group(1)
            found[name] = match.group(2)
        elif line.startswith(" " * 12) and name is not None:
            found[name] += " " + line.strip()
        elif line.strip():
            break
    return {k: " ".join(v.replace("``", "`").split()) for k, v in found.items()}


def _models() -> dict[str, type[BaseModel]]:
    """`RunSpec` and every model it holds, by name."""
    found: dict[str, type[BaseModel]] = {}
    pending: list[type[BaseModel]] = [RunSpec]
    while pending:
        model = pending.pop()
        if model.__name__ in found:
            continue
        found[model.__name__] = model
        for field in model.model_fields.values():
            pending.extend(_nested(field.annotation))
    return found


def _nested(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _nested(arg)]


def _descriptions(name: str, model: type[BaseModel]) -> dict[str, str]:
    described = _attributes(model.__doc__)
    if name == "LimitsSpec":
        described.update(_attributes(AgentLimits.__doc__))
    described.update(DESCRIPTIONS.get(name, {}))
    return described


def team_file_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a team file, every key described.

    Raises:
        ValueError: A key of the team file has no description.
    """
    schema = RunSpec.model_json_schema(mode="validation")
    models = _models()
    for name, definition in [("RunSpec", schema), *schema.get("$defs", {}).items()]:
        if "properties" not in definition:
            continue
        described = _descriptions(name, models[name])
        definition["description"] = _summary(models[name].__doc__)
        for key, prop in definition["properties"].items():
            if key not in described:
                raise ValueError(f"the team file key {name}.{key} has no description")
            prop["description"] = described[key]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "Clearance team file"
    return schema


def _summary(doc: str | None) -> str:
    """A docstring's first paragraph, on one line."""
    first = (doc or "").strip().split("\n\n")[0]
    return " ".join(first.replace("``", "`").split())


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a ``## `heading` `` line."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-")


_LINKS = {name: f"[{name}](#{_anchor(heading)})" for name, heading, _ in SECTIONS}


def _type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """A property's type in words: ``integer``, ``list of string``, ``AgentSpec | null``."""
    if "$ref" in prop:
        name = str(prop["$ref"]).rsplit("/", 1)[-1]
        return _LINKS.get(name) or _type(defs[name], defs)
    if "anyOf" in prop:
        return " | ".join(_type(p, defs) for p in prop["anyOf"])
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    json_type = prop.get("type", "any")
    if json_type == "array":
        return f"list of {_type(prop.get('items', {}), defs)}"
    if json_type == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"map of {_type(prop['additionalProperties'], defs)}"
    return str(json_type)


def _default(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" not in prop:
        return "—"
    if isinstance(prop["default"], dict) and prop["default"] and "$ref" in prop:
        return "see its section"
    return f"`{json.dumps(prop['default'])}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


_START = (
    "## Start",
    "",
    "```bash",
    "clearance init                             # writes team.yaml and its schema here",
    "clearance run team.yaml --model fake:try   # a deterministic fake model: no model needed",
    "clearance run team.yaml                    # the team's model: (or --model openai:...)",
    "clearance inspect RUN_ID                   # what each agent was shown",
    "clearance verify RUN_ID                    # no prompt held anything outside its clearance",
    "```",
    "",
    "A task's prompt holds its own text, its agent's `instructions` and the results of the "
    "tasks in its `depends_on`; nothing else. To grow the starter, add an agent under "
    "`agents:` and a task under `tasks:` naming it as `assignee:` (with `depends_on:` for "
    "the results it needs); give a task an `output_schema:` for a JSON answer, an agent "
    "`tools:` for functions of your own (listed in the team's `tools:` as "
    "`module:function`: an installed module, else that module alone from the folder you "
    "run `clearance` from, its own imports installed) "
    "and `memory:` to remember across runs. A mistake is one line naming the file and the "
    "key. Runs on the fake model keep their memory apart: a run on a real model never "
    "recalls it.",
    "",
)


def team_file_markdown() -> str:
    """The team file's reference in Markdown: each section's keys, types, defaults, examples."""
    schema = team_file_schema()
    definitions = schema["$defs"]
    lines = [
        "# Team file reference",
        "",
        "<!-- Generated from the RunSpec models by clearance._core.team_reference; "
        "do not edit. -->",
        "",
        "A team file is the YAML form of a run's definition (`RunSpec`): the ledger records it "
        "when a run starts, and `clearance resume` reads it back. `clearance init` writes a "
        "commented starter; this page lists every key. Unknown keys, and a key given twice, are "
        "refused.",
        "",
        *_START,
        "## Editor support",
        "",
        f"`{SCHEMA_ID}` (in `docs/`, or printed by `clearance schema`) is the JSON Schema of "
        "a team file. `clearance init` writes it beside the starter team, whose first line "
        "points editors with the YAML language server (VS Code's YAML extension, Neovim, "
        "Helix, JetBrains) at it:",
        "",
        "```yaml",
        f"# yaml-language-server: $schema={SCHEMA_ID}",
        "```",
        "",
        "The path is relative to the team file; an absolute path or URL works too. Refresh it "
        f"after upgrading Clearance: `clearance schema > {SCHEMA_ID}`.",
        "",
    ]
    for name, heading, example in SECTIONS:
        definition = schema if name == "RunSpec" else definitions[name]
        required = set(definition.get("required", []))
        title = heading if name == "RunSpec" else f"`{heading}`"
        lines += [f"## {title}", "", definition["description"], ""]
        lines += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
        for key, prop in definition["properties"].items():
            cells = (
                f"`{key}`",
                _cell(_type(prop, definitions)),
                _cell(_default(prop, key in required)),
                _cell(prop["description"]),
            )
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        if example:
            lines += ["```yaml", example.rstrip("\n"), "```", ""]
    return "\n".join(lines)


def example_fragments() -> dict[str, Any]:
    """Each section's example, parsed (what a test validates against the schema)."""
    return {name: yaml.safe_load(example) for name, _, example in SECTIONS if example}
