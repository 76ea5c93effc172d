"""``clearance graph`` refuses what ``clearance run`` refuses before anything runs, the same way.

Both commands call one check (`checked_run`): each team file here is refused by both with
exit 2 and the same one line ``error: FILE: FIELD: message``, and a valid team still prints
its graph. Checking runs no user code: a ``tools:`` module or a ``python:`` step module is
only looked up, and an MCP server is not started.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clearance.cli import app

runner = CliRunner()

BASE = {
    "name": "t",
    "model": "fake:try",
    "agents": [
        {"name": "w", "instructions": "You write."},
        {"name": "r", "instructions": "You review."},
    ],
    "tasks": [
        {"id": "a", "title": "A", "description": "Do A.", "assignee": "w"},
        {"id": "b", "title": "B", "description": "Do B.", "assignee": "w", "depends_on": ["a"]},
    ],
}


def _team(**changes: object) -> dict[str, object]:
    """``BASE`` with task ``a``, agent ``w`` or top-level keys changed."""
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["tasks"][0].update(changes.pop("task_a", {}))
    data["tasks"][0] = {k: v for k, v in data["tasks"][0].items() if v is not None}
    data["agents"][0].update(changes.pop("agent_w", {}))
    data["agents"].extend(changes.pop("more_agents", []))
    data.update(changes)
    return data


_NEVER_STARTED = {"command": ["python", "-c", "raise SystemExit(3)"]}

CASES = {
    "two MCP entries of one function name": (
        _team(
            agent_w={"tools": ["mcp:s/a.b"]},
            mcp_servers={"s": _NEVER_STARTED},
            more_agents=[{"name": "h", "instructions": "Help.", "tools": ["mcp:s/a_b"]}],
        ),
        "agents.h.tools: 'mcp:s/a.b' (of agent w) and 'mcp:s/a_b' would both be called "
        "'mcp__s__a_b'",
    ),
    "a tools: entry named like an MCP tool": (
        _team(agent_w={"tools": ["mcp__s__a"]}, tools={"mcp__s__a": "json:dumps"}),
        "tools.mcp__s__a: 'mcp__s__a' is named like an MCP tool",
    ),
    "two tasks of one title": (
        _team(task_a={"title": "b"}),
        "tasks.b.title: tasks 'a' and 'b' have the same title 'B': results are labelled by "
        "title, so give each task a title of its own",
    ),
    "unknown assignee": (
        _team(task_a={"assignee": "ghost"}),
        "tasks.a.assignee: task 'a' is assigned to unknown agent 'ghost' (agents: r, w)",
    ),
    "unknown reviewer": (
        _team(task_a={"review": {"by": ["ghost"]}}),
        "tasks.a.review.by: task 'a' is reviewed by 'ghost': name another agent of the team "
        "than its assignee",
    ),
    "reviewer is the assignee": (
        _team(task_a={"review": {"by": ["w"]}}),
        "tasks.a.review.by: task 'a' is reviewed by 'w'",
    ),
    "reviewer with tools": (
        _team(
            task_a={"review": {"by": ["r2"]}},
            more_agents=[{"name": "r2", "instructions": "Check.", "tools": ["write_output"]}],
        ),
        "tasks.a.review.by: reviewer 'r2' of task 'a' answers in one call",
    ),
    "fan_out to an unknown agent": (
        _team(task_a={"fan_out": {"agent": "ghost", "goals": ["g"]}}),
        "tasks.a.fan_out: task 'a' fans out to 'ghost', but its assignee 'w' may spawn only: "
        "nobody (can_spawn)",
    ),
    "fan_out outside can_spawn": (
        _team(
            task_a={"fan_out": {"agent": "r", "goals": ["g"]}},
            agent_w={"can_spawn": ["h"]},
            more_agents=[{"name": "h", "instructions": "Help."}],
        ),
        "tasks.a.fan_out: task 'a' fans out to 'r', but its assignee 'w' may spawn only: h",
    ),
    "fan_out over max_children": (
        _team(
            task_a={"fan_out": {"agent": "h", "goals": ["g1", "g2"]}},
            agent_w={"can_spawn": ["h"], "limits": {"max_children": 1}},
            more_agents=[{"name": "h", "instructions": "Help."}],
        ),
        "tasks.a.fan_out: task 'a' fans out to 2 children, over its assignee's max_children (1)",
    ),
    "unknown tool": (
        _team(agent_w={"tools": ["nosuchtool"]}),
        "agents.w.tools: unknown tool 'nosuchtool' (tools: store_get,",
    ),
    "store tool without a store": (
        _team(agent_w={"tools": ["store_get"]}),
        "agents.w.tools: tool 'store_get' needs a context store",
    ),
    "tool module not found": (
        _team(agent_w={"tools": ["x"]}, tools={"x": "nonexistent_mod_zz:f"}),
        "tools.x: cannot import 'nonexistent_mod_zz': ModuleNotFoundError: No module named "
        "'nonexistent_mod_zz' (installed or in the current folder)",
    ),
    "tool package not found": (
        _team(agent_w={"tools": ["x"]}, tools={"x": "nonexistent_pkg_zz.sub:f"}),
        "tools.x: cannot import 'nonexistent_pkg_zz.sub': ModuleNotFoundError: No module "
        "named 'nonexistent_pkg_zz' (installed or in the current folder)",
    ),
    "tool path without a colon": (
        _team(agent_w={"tools": ["x"]}, tools={"x": "os"}),
        "tools.x: 'os' is not an import path of the form 'package.module:function'",
    ),
    "tool path with a relative module": (
        _team(agent_w={"tools": ["x"]}, tools={"x": "..os:getcwd"}),
        "tools.x: '..os:getcwd' is not an import path of the form 'package.module:function'",
    ),
    "tool entry without a function": (
        _team(agent_w={"tools": ["x"]}, tools={"x": {"approval": "required"}}),
        "tools.x: the tool 'x' has no import path (it was given in code)",
    ),
    "unknown step": (
        _team(task_a={"run": "step:nosuch", "assignee": None}),
        "tasks.a.run: unknown step 'nosuch'",
    ),
    "python step module not found": (
        _team(task_a={"run": "python:nonexistent_mod_zz:f", "assignee": None}),
        "tasks.a.run: cannot import 'nonexistent_mod_zz': ModuleNotFoundError: No module "
        "named 'nonexistent_mod_zz' (installed or in the current folder)",
    ),
    "cost budget without a price": (
        _team(
            budget={"cost_usd": 1},
            prices={"openai:nothere": {"input_per_mtok": 1, "output_per_mtok": 1}},
        ),
        "prices: a cost budget needs a price for every model; none for fake:try",
    ),
    "synthesis_from an unknown task": (
        _team(synthesis_from=["ghost"]),
        "synthesis_from:",
    ),
    # A part's own check names the task it belongs to (it said only "fan_out.goals").
    "an empty fan-out goal": (
        _team(
            agent_w={"can_spawn": ["r"]}, task_a={"fan_out": {"agent": "r", "goals": ["x", " "]}}
        ),
        "tasks.a.fan_out.goals: a goal is empty",
    ),
    "a reviewer named twice": (
        _team(task_a={"review": {"by": ["r", "r"]}}),
        "tasks.a.review.by: name one or more reviewers, each once",
    ),
}


def _write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, output
    return lines[0]


def _run(path: Path, tmp_path: Path) -> tuple[int, str]:
    db = f"sqlite:///{tmp_path}/runs.db"
    result = runner.invoke(app, ["run", str(path), "--model", "fake:try", "--db", db])
    return result.exit_code, result.output


@pytest.mark.parametrize("case", sorted(CASES))
def test_graph_refuses_what_run_refuses(case: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    data, expected = CASES[case]
    path = _write(tmp_path, data)
    graph = runner.invoke(app, ["graph", str(path)])
    assert graph.exit_code == 2, graph.output
    line = _error_line(graph.output)
    assert line.startswith(f"error: {path}: {expected}"), line
    code, output = _run(path, tmp_path)
    assert code == 2, output
    assert _error_line(output) == line
    assert "run id" not in output  # refused before anything ran


def test_unknown_report_refused_by_graph_as_by_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, _team(report="step:nosuch"))
    message = "report: unknown report 'nosuch' (reports: code_review_report, run_report)"
    graph = runner.invoke(app, ["graph", str(path)])
    assert graph.exit_code == 2, graph.output
    assert _error_line(graph.output) == f"error: {path}: {message}"
    code, output = _run(path, tmp_path)
    assert code == 2, output
    assert _error_line(output) == f"error: {path}: {message}"


def test_valid_team_prints_its_graph(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, _team(task_a={"review": {"by": ["r"]}}, report="step:run_report"))
    result = runner.invoke(app, ["graph", str(path)])
    assert result.exit_code == 0, result.output
    assert "t: 2 tasks" in result.output and "a  [w]  A" in result.output
    assert "depends on: a" in result.output


def test_graph_finds_tool_and_step_modules_without_running_them(
    tmp_path: Path, monkeypatch
) -> None:
    # A module in the current folder is found, not imported: its code never runs.
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "imported.txt"
    code = f"open({str(marker)!r}, 'w').close()\n\ndef f(text: str) -> str:\n    return text\n"
    (tmp_path / "zz_team_tools.py").write_text(code)
    (tmp_path / "zz_team_steps.py").write_text(code)
    data = _team(agent_w={"tools": ["x"]}, tools={"x": "zz_team_tools:f"})
    data["tasks"].append(  # type: ignore[attr-defined]
        {"id": "c", "title": "C", "description": "Step.", "run": "python:zz_team_steps:f"}
    )
    path = _write(tmp_path, data)
    result = runner.invoke(app, ["graph", str(path)])
    assert result.exit_code == 0, result.output
    assert "t: 3 tasks" in result.output
    assert not marker.exists()


def test_graph_does_not_start_mcp_servers(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "started.txt"
    server = {"command": ["python", "-c", f"open({str(marker)!r}, 'w').close()"]}
    data = _team(agent_w={"tools": ["mcp:s/echo"]}, mcp_servers={"s": server})
    path = _write(tmp_path, data)
    result = runner.invoke(app, ["graph", str(path)])
    assert result.exit_code == 0, result.output
    assert "t: 2 tasks" in result.output
    assert not marker.exists()


def test_tools_given_in_code_need_no_entry(tmp_path: Path) -> None:
    # The library's run_spec(spec, tools=...) passes the names it is given to the same check.
    from clearance import ConfigError, RunSpec
    from clearance.runs import checked_run

    path = _write(tmp_path, _team(agent_w={"tools": ["x"]}))
    spec = RunSpec.from_file(path)
    _, graph = checked_run(spec, tools={"x"})
    assert graph is not None and len(graph) == 2
    with pytest.raises(ConfigError, match="unknown tool 'x'") as caught:
        checked_run(spec)
    assert caught.value.field == "agents.w.tools" and caught.value.source is None
