"""The library path refuses what a team file refuses: model ids and tool names too long for
the ledger's columns, or no function name a provider takes, in one line before anything runs.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from clearance import (
    Agent,
    ConfigError,
    Orchestrator,
    RunLedger,
    RunOptions,
    RunServices,
    Task,
    Team,
    Tool,
)
from clearance.runs import check_model_id
from clearance.testing import FunctionModel

LONG_MODEL = "test:" + "m" * 300  # past calls.model_id (256 characters)
TEAM = Team(agents=(Agent(name="v", instructions="You are V."),), name="args20")


def ok(request: Any) -> str:
    return "ok"


def lookup(query: str) -> str:
    """Look something up."""
    return query


def _refused(**given: Any) -> str:
    """The one line `Orchestrator(...)` refuses ``given`` with."""
    team = given.pop("team", TEAM)
    given.setdefault("model", FunctionModel(ok, model_id="test:fn"))
    with pytest.raises(ConfigError) as caught:
        Orchestrator(team, **given)
    line = str(caught.value)
    assert "\n" not in line and len(line) < 300, line
    return line


def _named(name: str) -> Any:
    def function(query: str) -> str:
        """A tool."""
        return query

    function.__name__ = name
    return function


# -- model ids ---------------------------------------------------------------------------------


def test_a_chat_model_whose_id_is_over_the_ledgers_column_is_refused() -> None:
    line = _refused(model=FunctionModel(ok, model_id=LONG_MODEL))
    assert line.startswith("model: ") and "305 characters long, at most 256" in line, line


def test_a_model_id_string_over_the_column_or_not_an_id_is_refused() -> None:
    line = _refused(model=LONG_MODEL)
    assert line.startswith("model: ") and "at most 256" in line, line
    line = _refused(model="no provider")
    assert line.startswith("model: ") and "must look like 'provider:name'" in line, line


def test_a_model_instance_of_the_services_over_the_column_is_refused() -> None:
    services = RunServices(models={"test:fn": FunctionModel(ok, model_id=LONG_MODEL)})
    line = _refused(model="test:fn", services=services)
    assert line.startswith("services.models.test:fn: ") and "at most 256" in line, line
    services = RunServices(models={LONG_MODEL: FunctionModel(ok, model_id="test:fn")})
    line = _refused(model="test:fn", services=services)
    assert line.startswith("services.models: ") and "at most 256" in line, line


@pytest.mark.parametrize("model", ["test:" + "m" * 300, "x" * 10_000, "a b" * 1000])
def test_a_long_model_id_is_refused_in_one_short_line(model: str) -> None:
    # Whatever its shape: a long one that is no id at all was shown whole.
    with pytest.raises(ValueError, match=r"characters long, at most 256$") as caught:
        check_model_id(model)
    assert len(str(caught.value)) < 120


@pytest.mark.parametrize("model", [LONG_MODEL, "gpt-4o", "test:with space"])
def test_an_agents_model_is_checked_as_a_team_files_is(model: str) -> None:
    team = Team(agents=(Agent(name="v", instructions="V.", model=model),))
    line = _refused(team=team)
    assert line.startswith("agents.v.model: model id "), line
    coordinator = Agent(name="boss", instructions="B.", model=model)
    line = _refused(team=Team(agents=TEAM.agents, coordinator=coordinator))
    assert line.startswith("coordinator.model: model id "), line


def test_a_model_options_key_is_a_model_id_as_in_a_team_file() -> None:
    options = RunOptions(model_options={"smollm2": {"n_ctx": 512}})
    line = _refused(options=options)
    assert line.startswith("options.model_options: model id 'smollm2' must look like"), line
    options = RunOptions(model_options={LONG_MODEL: {"n_ctx": 512}})
    assert "at most 256" in _refused(options=options)


# -- tool names --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["t" * 129, "", "a b", "tab\there", "nul\x00", "semi;colon", "ü"])
def test_a_tool_named_past_the_column_or_unlike_a_function_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Tool(name=name, description="d", parameters={"type": "object"}, run=lambda a: None)
    line = str(caught.value)
    assert line.startswith("name: a tool's name is what a model calls") and "\n" not in line


def test_a_tool_at_the_columns_length_is_a_tool() -> None:
    # An MCP tool's function name may be up to 128 characters, dots included.
    name = "mcp__server__" + "t.x-" * 28 + "abc"
    assert len(name) == 128
    assert Tool(name=name, description="d", parameters={"type": "object"}, run=print).name == name


def test_a_function_tool_without_a_function_name_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        Tool.from_function(functools.partial(lookup, query="x"))
    line = str(caught.value)
    assert line.startswith("name: a tool's name is what a model calls") and "\n" not in line


@pytest.mark.parametrize(
    ("tools", "field", "why"),
    [
        ([_named("x" * 65)], "tools.", "1-64 letters"),
        ([lambda query: query], "tools.<lambda>", "1-64 letters"),
        ({"bad name": lookup}, "tools.bad name", "1-64 letters"),
        ({"9lives": lookup}, "tools.9lives", "starting with a letter or '_'"),
        ({"store_get": lookup}, "tools.store_get", "is the name of a built-in tool"),
        ({"write_output": lookup}, "tools.write_output", "is the name of a built-in tool"),
        (["lookup"], "tools: must be a function or a Tool, got str 'lookup'", ""),
        ({"lookup": 3}, "tools.lookup: must be a function or a Tool, got int 3", ""),
    ],
)
def test_a_user_tool_is_named_as_a_team_files_tools_are(tools: Any, field: str, why: str) -> None:
    line = _refused(tools=tools)
    assert line.startswith(field) and why in line, line


def test_a_tool_function_an_agent_lists_is_named_as_a_team_files_tools_are() -> None:
    agent = Agent(name="v", instructions="V.", tools=(_named("has space"),))
    line = _refused(team=Team(agents=(agent,)))
    assert line.startswith("agents.v.tools: ") and "1-64 letters" in line, line


def test_a_tool_mapped_under_another_name_than_its_own_is_refused() -> None:
    # The model is offered the Tool's own name, the agent lists the key: a call could
    # never reach it.
    tool = Tool(name="other", description="d", parameters={"type": "object"}, run=print)
    line = _refused(tools={"lookup": tool})
    assert line.startswith("tools.lookup: ") and "'other'" in line, line


async def test_nothing_is_recorded_for_a_refused_argument(tmp_path: Any) -> None:
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        with pytest.raises(ConfigError):
            Orchestrator(TEAM, model=FunctionModel(ok, model_id=LONG_MODEL), ledger=ledger)
        assert ledger.list_runs() == []
        # The same team with a model id within the column runs and records it.
        model = FunctionModel(ok, model_id="test:" + "m" * 251)
        result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(
            [Task(id="a", title="A", description="do a", assignee="v")]
        )
        assert result.status == "completed", result.error
        assert {c.model_id for c in ledger.calls(result.run_id)} == {model.model_id}
