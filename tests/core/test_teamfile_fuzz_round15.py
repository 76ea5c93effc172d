"""Fuzzed team files: loading succeeds or refuses with one line, never a traceback.

Mutations of the example team files (keys dropped, duplicated or unknown at any level, values
of the wrong type, huge or non-finite numbers, long strings, control characters, deep
nesting) and of their text (anchors, merge keys, Python tags, several documents, a BOM, CRLF,
bytes that are not UTF-8, an empty file). Each is loaded as ``clearance run`` checks it
before anything runs (`load_checked`): it succeeds or raises `ConfigError` whose message is
one line; through the CLI (``graph``, ``graph --estimate``, ``plan``, and ``run`` with an
``--output`` folder that is missing, so it never calls a model) it exits 0, 1 (an
estimate over budget) or 2 with exactly one ``error:`` line, within 2 s.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from clearance import ConfigError
from clearance.cli import app
from clearance.cli._team_setup import load_checked

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
TEXTS = {path.name: path.read_text(encoding="utf-8") for path in EXAMPLES}
DATA = {name: yaml.safe_load(text) for name, text in TEXTS.items()}
KEYS = sorted(
    {
        "name", "goal", "agents", "tasks", "coordinator", "input", "model", "model_options",
        "max_concurrency", "synthesis", "synthesis_from", "isolation", "executor", "store",
        "memory", "mcp_servers", "prices", "report", "project", "workspace", "approvals",
        "instructions", "limits", "sampling", "tools", "store_grants", "can_spawn", "id",
        "title", "description", "assignee", "depends_on", "files", "review", "by", "rounds",
        "for_each_file", "output_schema", "max_output_tokens", "max_prompt_tokens",
        "max_model_calls", "temperature", "default", "include", "step", "python",
    }
)  # fmt: skip
runner = CliRunner()

_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12
) | st.sampled_from(
    ["a\nb", "a\rb", "a\x85b", "a\u2028b", "\x1b[31m", "\u202e", "..", "../x", "/etc/passwd",
     "python:os", "{path}", "${HOME}", "x" * 5000, "é" * 300, "", " ",
     # values of keys that take a form: tools, models, URLs, globs, templates
     "mcp:x/y", "mcp:", "mcp:/", "a:b", "os:system", "x.y:z", ":", "sqlite://", "sqlite:///:memory:",
     "postgresql://u:p@h:99999/d", "redis://", "http://[::1", "openai:", "fake:", "llama:../x",
     "anthropic:x", "openai:gpt@http://127.0.0.1:1", "[", "**", "*.py", "\\", "[!", "{stem}",
     "{unknown}", "{", "}", "%s", "{0}", "{path.__class__}", "store_get", "spawn", "write_output"]
)  # fmt: skip
_SCHEMA = st.sampled_from(
    [{"type": "nope"}, {"$ref": "#/nowhere"}, {"$ref": "http://127.0.0.1:1/s.json"},
     {"type": "string", "pattern": "("}, {"type": ["object"], "properties": 5},
     {"type": "object", "required": "x"}, {"enum": []}, {"allOf": [{"$ref": "#"}]},
     {"type": "integer", "maximum": "x"}, {"$schema": "http://nope"}, {"format": "regex"}]
).map(copy.deepcopy)  # fmt: skip
# (a fresh copy each time: a mutation of one drawn schema must not change the strategy's own,
# which made later examples draw differently, a FlakyStrategyDefinition)
_NUMBER = st.one_of(
    st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 10**30, 10**300, 2**63]),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 0.5, 1e-300]),
)  # fmt: skip
_SCALAR = st.one_of(st.none(), st.booleans(), _TEXT, _NUMBER)
_VALUE = st.recursive(
    _SCALAR | _SCHEMA,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | _TEXT, inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``value`` (keys of mappings, indexes of lists), the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


@st.composite
def _mutated_data(draw: st.DrawFn) -> str:
    """An example's data with a few mutations, dumped as YAML."""
    data = copy.deepcopy(DATA[draw(st.sampled_from(sorted(DATA)))])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(data)))
        target = _at(data, path)
        op = draw(st.sampled_from(["replace", "drop", "unknown", "nest", "dup_item", "same_type"]))
        if op == "same_type" and path and isinstance(target, (str, int)):  # bool: an int
            same = _TEXT if isinstance(target, str) else _NUMBER
            _at(data, path[:-1])[path[-1]] = draw(same)
        elif op == "replace" and path:
            _at(data, path[:-1])[path[-1]] = draw(_VALUE)
        elif op == "drop" and path:
            parent = _at(data, path[:-1])
            del parent[path[-1]]
        elif op == "unknown" and isinstance(target, dict):
            target[draw(st.sampled_from(KEYS) | _TEXT)] = draw(_VALUE)
        elif op == "nest" and path:
            deep: Any = draw(_SCALAR)
            for _level in range(draw(st.integers(1, 80))):
                deep = [deep] if draw(st.booleans()) else {"k": deep}
            _at(data, path[:-1])[path[-1]] = deep
        elif op == "dup_item" and isinstance(target, list) and target:
            target.append(copy.deepcopy(target[0]))
    return yaml.safe_dump(data, allow_unicode=draw(st.booleans()), width=10**6)


_TEXT_EDITS = [
    lambda t: "\ufeff" + t,
    lambda t: t.replace("\n", "\r\n"),
    lambda t: t + "---\nname: second\n",
    lambda t: "--- !!python/object/apply:os.system ['true']\n",
    lambda t: t.replace("agents:", "agents: !!python/object:builtins.dict", 1),
    lambda t: (
        "base: &b {instructions: x, limits: {max_output_tokens: 5}}\n"
        + t.replace("  - name: ", "  - <<: *b\n    name: ", 1)
    ),
    lambda t: t.replace("name:", "name: &n", 1) + "extra: *n\n",
    lambda t: t + "name: duplicate\n",
    lambda t: t.replace("  - name: ", "  - name: dup\n    name: ", 1),
    lambda t: t.replace("\n", "\r"),
    lambda t: t.replace("\n", "\n\ufeff", 1),
    lambda t: t.replace("tasks:", "tasks: !!omap", 1),
    lambda t: t.replace("agents:", "agents: !!python/name:os.system", 1),
    lambda t: t + "...\n--- \n",
    lambda t: t + "agents: []\n",
    lambda t: t[: len(t) // 2],
    lambda t: "",
    lambda t: "# only a comment\n",
    lambda t: "[1, 2, 3]\n",
    lambda t: "just a string\n",
    lambda t: "a: &a [*a]\n",
    lambda t: "x: " + "[" * 2000 + "]" * 2000 + "\n",
    lambda t: t + "max_concurrency: " + "9" * 401 + "\n",
    lambda t: t + "max_concurrency: 1:2:3:4:5:6:7:8:9\n",
    lambda t: t + "max_concurrency: .nan\n",
    lambda t: t + "max_concurrency: !!float 1e999\n",
    lambda t: t + "max_concurrency: !!binary aGVsbG8=\n",
    lambda t: t + "max_concurrency: 2001-01-01\n",
    lambda t: t + "? [a, b]\n: c\n",
    lambda t: t + "? {a: b}\n: c\n",
    lambda t: t + "1: x\n",
    lambda t: t + "null: x\n",
    lambda t: t + "!!set {a, b}: x\n",
    lambda t: t.replace("name:", "name: !!str", 1),
    lambda t: t.replace("name:", "name: !custom", 1),
    lambda t: "%YAML 1.1\n---\n" + t,
    lambda t: "\t" + t,
    lambda t: t + "\x00",
    lambda t: t + "\x07\n",
]


@st.composite
def _team_bytes(draw: st.DrawFn) -> bytes:
    """A mutated team file's bytes."""
    text = (
        draw(_mutated_data())
        if draw(st.booleans())
        else TEXTS[draw(st.sampled_from(sorted(TEXTS)))]
    )
    for edit in draw(st.lists(st.sampled_from(_TEXT_EDITS), max_size=2)):
        text = edit(text)
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 9:
        cut = draw(st.integers(0, len(data)))
        data = (
            data[:cut]
            + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"]))
            + data[cut:]
        )
    return data


def _one_line(exc: ConfigError) -> None:
    message = str(exc)
    assert message and len(message.splitlines()) == 1, repr(message)
    assert "Traceback" not in message


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=_team_bytes())
def test_loading_succeeds_or_refuses_with_one_line(tmp_path_factory: Any, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "team.yaml"
    path.write_bytes(data)
    started = time.monotonic()
    try:
        load_checked(path, None)
    except ConfigError as exc:
        _one_line(exc)
    assert time.monotonic() - started < 2


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=_team_bytes(),
    command=st.sampled_from([["graph"], ["graph", "--estimate"], ["plan"], ["run"]]),
)
def test_cli_exits_with_one_error_line(
    tmp_path_factory: Any, data: bytes, command: list[str]
) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "team.yaml"
    path.write_bytes(data)
    started = time.monotonic()
    args = [*command, str(path)]
    if command == ["plan"]:
        args += ["--model", "fake:x", "--goal", "g", "-o", str(folder / "plan.yaml"),
                 "--db", f"sqlite:///{folder / 'runs.db'}"]  # fmt: skip
    elif command == ["run"]:  # refused before any model call: the --output folder is missing
        args += ["--model", "fake:x", "--goal", "g", "-o", str(folder / "none" / "out.md"),
                 "--db", f"sqlite:///{folder / 'runs.db'}"]  # fmt: skip
    result = runner.invoke(app, args)
    assert time.monotonic() - started < 2
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    if result.exit_code == 2:
        assert len(errors) == 1, result.output
    elif command == ["run"]:
        raise AssertionError(f"run was not refused: {result.output}")
    else:
        assert result.exit_code in (0, 1) and not errors, (result.exit_code, result.output)


@pytest.mark.parametrize("key", ["a\u2028b", "a\x85b", "a\x1cb", "a\rb", "a\nb"])
def test_an_unknown_key_with_a_line_break_is_named_on_one_line(tmp_path: Path, key: str) -> None:
    """The field path quotes a key that holds a line break (it was the message's second line)."""
    path = tmp_path / "team.yaml"
    escaped = key.encode("unicode_escape").decode("ascii")
    path.write_text(f'name: t\nagents: [{{name: a, instructions: x, "{escaped}": 1}}]\n')
    with pytest.raises(ConfigError) as caught:
        load_checked(path, None)
    assert str(caught.value).splitlines() == [str(caught.value)]
    assert caught.value.field == f"agents.0.{key!r}"
    assert str(caught.value).endswith(f"agents.0.{key!r}: Extra inputs are not permitted")


@pytest.mark.parametrize("task", ["for_each_file: '*.txt'", "files: [a.txt]"])
def test_an_empty_include_glob_is_refused_on_one_line(tmp_path: Path, task: str) -> None:
    """``input.include: ['']`` was a ValueError traceback (``empty pattern``) from pathlib."""
    (tmp_path / "a.txt").write_text("x")
    path = tmp_path / "team.yaml"
    path.write_text(
        f"name: t\ninput: {{default: {str(tmp_path)!r}, include: ['*.md', '']}}\n"
        "agents: [{name: a, instructions: x}]\n"
        f"tasks: [{{id: t, title: T, description: d, assignee: a, {task}}}]\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_checked(path, None)
    assert caught.value.field == "input.include.1"
    assert caught.value.message == "String should have at least 1 character, got ''"
    result = runner.invoke(app, ["graph", str(path)])
    assert result.exit_code == 2
    assert result.output.splitlines() == [f"error: {caught.value}"]
