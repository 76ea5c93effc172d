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
