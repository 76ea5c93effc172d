"""A team file whose store grant no namespace can match is refused in one line (exit 2).

A grant holding a NUL character (YAML ``"\\0"``) was accepted, and every ``store_search`` of
its agent then failed at run time, even over its other grants. ``run`` and ``graph`` now
refuse the file before anything runs, naming the grant, and create no store.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance.cli import app


def cli(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(
        app, list(args), env={"CLEARANCE_DB": None, "CLEARANCE_STORE_DB": None}
    )
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


@pytest.mark.parametrize("grant", ['"fa\\0cts"', '"notes/\\0*"', '"' + "n" * 300 + '"'])
@pytest.mark.parametrize("command", ["graph", "run"])
def test_a_grant_no_namespace_can_match_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grant: str, command: str
) -> None:
    monkeypatch.chdir(tmp_path)
    team = (
        "name: t\n"
        f"store: sqlite:///{tmp_path / 'store.db'}\n"
        "agents:\n"
        "  - name: reader\n"
        "    instructions: You read.\n"
        "    tools: [store_search]\n"
        f"    store_grants: {{facts: read, {grant}: read}}\n"
        "tasks:\n"
        "  - {id: t1, title: T, description: Do it., assignee: reader}\n"
    )
    (tmp_path / "team.yaml").write_text(team)
    args = ["run", "team.yaml", "--model", "fake:m", "--db", f"sqlite:///{tmp_path / 'r.db'}"]
    code, lines = cli(*(args if command == "run" else ["graph", "team.yaml"]))
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: team.yaml: agents."), lines
    assert ".store_grants." in lines[0], lines
    assert "no namespace" in lines[0], lines
    assert not (tmp_path / "store.db").exists()
