"""A delegate's MCP tools are bounded by its delegator's, over a real stdio MCP server.

The agent lists ``mcp:<server>/<tool>``, the model calls ``mcp__<server>__<tool>``: the
ceiling, the ``tools_withheld`` event and ``clearance verify`` must agree on which is which.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("mcp")

from clearance import RunLedger
from clearance._context.authority import Authority
from clearance.cli import app

pytestmark = pytest.mark.network

SERVER = Path(__file__).with_name("mcp_server.py")
runner = CliRunner()


def team(marker: Path) -> dict[str, Any]:
    server = {"command": [sys.executable, str(SERVER), "stdio"],
              "env": {"MCP_MARKER_FILE": str(marker)}}  # fmt: skip
    return {
        "name": "mcp-ceiling",
        "mcp_servers": {"docs": server},
        "agents": [
            {
                "name": "asker",
                "instructions": "You ask.",
                "tools": ["mcp:docs/lookup"],
                "can_delegate_to": ["cleaner"],
            },
            {
                "name": "cleaner",
                "instructions": "You clean.",
                "tools": ["mcp:docs/lookup", "mcp:docs/delete_everything"],
            },
        ],
        "tasks": [
            {"id": "ask", "title": "Ask", "description": "Have it cleaned.", "assignee": "asker"},
            {
                "id": "own",
                "title": "Own",
                "description": "Say hi.",
                "assignee": "cleaner",
                "depends_on": ["ask"],
            },
        ],
    }


def reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"], messages[-1]["content"]
    done = "## Results of your tool calls" in user
    if "You clean." in system and "Clean it all." in user:
        if done:
            return "cleaned"
        return [("mcp__docs__delete_everything", {}), ("mcp__docs__lookup", {"term": "x"})]
    if "You clean." in system:
        return "hi"
    if "You ask." in system:
        return "asked" if done else [("delegate", {"agent": "cleaner", "task": "Clean it all."})]
    return "the synthesis"


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openai_server: Any) -> tuple[str, str]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(team(tmp_path / "marker")))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = runner.invoke(app, ["run", str(path), "--model", "openai:m", "--db", db])
    assert result.exit_code == 0, result.output
    found = re.search(r"run id: (\S+)", result.output)
    assert found is not None
    return db, found.group(1)


def test_a_delegate_is_not_given_an_mcp_tool_its_delegator_lacks(
    tmp_path, monkeypatch, openai_server
) -> None:
    db, run_id = run(tmp_path, monkeypatch, openai_server)
    assert not (tmp_path / "marker").exists()  # delete_everything never ran
    with RunLedger(db) as ledger:
        (event,) = [e for e in ledger.events(run_id) if e.kind == "tools_withheld"]
        assert event.data == {"agent": "cleaner", "tools": ["mcp__docs__delete_everything"]}
        calls = {t.name: t for t in ledger.tool_calls(run_id) if t.agent == "cleaner"}
        assert "withheld" in calls["mcp__docs__delete_everything"].result
        assert calls["mcp__docs__lookup"].result == "glossary: x means a bounded thing"
    shown = runner.invoke(app, ["inspect", run_id, "--db", db, "--json"])
    assert shown.exit_code == 0, shown.output
    assert any(e["kind"] == "tools_withheld" for e in json.loads(shown.output)["events"])
    verified = runner.invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 0, verified.output


def test_verify_flags_a_delegates_call_of_an_mcp_tool_its_delegator_lacks(
    tmp_path, monkeypatch, openai_server
) -> None:
    monkeypatch.setattr(Authority, "withholds", lambda self, name: False)
    db, run_id = run(tmp_path, monkeypatch, openai_server)
    assert (tmp_path / "marker").exists()  # the confused deputy, reproduced
    verified = runner.invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code != 0, verified.output
    assert "'cleaner' called 'mcp__docs__delete_everything' acting for 'asker'" in (verified.output)
    assert "mcp__docs__lookup" not in verified.output


def child_team(marker: Path) -> dict[str, Any]:
    spec = team(marker)
    spec["agents"][0] = {"name": "asker", "instructions": "You ask.",
                         "tools": ["mcp:docs/lookup"], "can_spawn": ["cleaner"]}  # fmt: skip
    spec["tasks"][0]["fan_out"] = {"agent": "cleaner", "goals": ["Clean it all."]}
    return spec


def test_a_spawned_child_is_not_given_an_mcp_tool_its_parent_lacks(
    tmp_path, monkeypatch, openai_server
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(child_team(tmp_path / "marker")))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = runner.invoke(app, ["run", str(path), "--model", "openai:m", "--db", db])
    assert result.exit_code == 0, result.output
    run_id = re.search(r"run id: (\S+)", result.output).group(1)  # type: ignore[union-attr]
    assert not (tmp_path / "marker").exists()  # delete_everything never ran
    with RunLedger(db) as ledger:
        (event,) = [e for e in ledger.events(run_id) if e.kind == "tools_withheld"]
        assert event.subject.startswith("child:")
        assert event.data == {"agent": "cleaner", "tools": ["mcp__docs__delete_everything"]}
        calls = {t.name: t for t in ledger.tool_calls(run_id) if t.agent == "cleaner"}
        assert "withheld" in calls["mcp__docs__delete_everything"].result
        assert calls["mcp__docs__lookup"].result == "glossary: x means a bounded thing"
    verified = runner.invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 0, verified.output
