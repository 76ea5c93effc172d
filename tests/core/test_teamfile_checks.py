"""Team-file keys that would have no effect are refused at load, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance import ConfigError
from clearance._core.teamfile import load_team_file

TEAM = """\
name: checks
{extra}agents:
  - {{name: a, instructions: You work.{a}}}
  - {{name: b, instructions: You help.}}
tasks:
  - {{id: t, title: T, description: Do it., assignee: a}}
"""


def load(tmp_path: Path, a: str = "", extra: str = "") -> None:
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(a=a, extra=extra))
    load_team_file(path)


@pytest.mark.parametrize(
    ("a", "extra", "named"),
    [
        (', store_grants: {"n/*": read}', "", "agents.a.store_grants"),
        (", limits: {compact_tool_steps: 2}", "", "agents.a.limits.compact_tool_steps"),
        ("", "workspace: ws\n", "workspace"),
        # Only the store tools reach the store: a store no agent can use is a no-op.
        ("", "store: sqlite:///s.db\n", "store"),
        (', store_grants: {"n/*": read}, can_delegate_to: [b]', "store: sqlite:///s.db\n", "store"),
        # Reads through store tools are what it extends: none, no effect.
        (", store_read_extends_ttl_s: 60", "", "agents.a.store_read_extends_ttl_s"),
        # A memory no agent recalls or records.
        ("", "memory: sqlite:///m.db\n", "memory"),
        ("", "memory: {url: 'sqlite:///m.db', on_error: continue}\n", "memory"),
        # A tool entry no agent lists is never offered.
        ("", "tools: {x: 'os:getcwd'}\n", "tools.x"),
    ],
)
def test_a_key_without_effect_is_refused(tmp_path: Path, a: str, extra: str, named: str) -> None:
    with pytest.raises(ConfigError, match="has no effect") as caught:
        load(tmp_path, a, extra)
    assert f": {named}: has no effect" in str(caught.value)


@pytest.mark.parametrize(
    ("a", "extra"),
    [
        (', store_grants: {"n/*": read}, tools: [store_get]', "store: sqlite:///s.db\n"),
        # A delegator's grants bound what its delegate may do, even without its own store tool.
        (', store_grants: {"n/*": read}, can_delegate_to: [b]', ""),
        (", tools: [write_output], limits: {compact_tool_steps: 2}", "workspace: ws\n"),
    ],
)
def test_a_key_with_effect_is_accepted(tmp_path: Path, a: str, extra: str) -> None:
    load(tmp_path, a, extra)


@pytest.mark.parametrize("name", ["write_output", "store_get", "store_anything", "delegate"])
def test_a_tool_entry_named_like_a_built_in_is_refused(tmp_path: Path, name: str) -> None:
    # The built-in always wins: the entry's function would silently never run.
    with pytest.raises(ConfigError, match=rf"tools\.{name}: is the name of a built-in tool"):
        load(tmp_path, f", tools: [{name}]", f"tools: {{{name}: 'os:getcwd'}}\n")


def test_a_message_from_an_agent_the_team_does_not_have_is_refused(tmp_path: Path) -> None:
    extra = "messages: [{from: ghost, to: a, content: hi}]\n"
    with pytest.raises(ConfigError, match=r"messages\.0\.from: message from unknown agent"):
        load(tmp_path, "", extra)


@pytest.mark.parametrize("name", ["''", "'a b'", "'1x'", "'x.y'", "'" + "x" * 65 + "'"])
def test_a_tool_entry_whose_name_a_model_cannot_call_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=r"a tool's name is what a model calls"):
        load(tmp_path, f", tools: [{name}]", f"tools: {{{name}: 'os:getcwd'}}\n")
